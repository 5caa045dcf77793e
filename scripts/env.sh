# Sourced by the other scripts: puts the CUDA toolkit's nvcc on PATH where it is installed, so
# meson's cuda feature finds it; without it the build goes on with the cpu backend only.
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  if [ -x "$d/nvcc" ]; then
    case ":$PATH:" in *":$d:"*) ;; *) PATH="$d:$PATH" ;; esac
    break
  fi
done
export PATH
