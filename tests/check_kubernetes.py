#!/usr/bin/env python3
"""Checks deploy/kubernetes: every document, as kubectl apply -k would send it, and how they fit.

- Renders each kustomization the way kustomize does for what these files use (resources,
  components, JSON 6902 patches), the base alone and with each component, so what is checked is
  what a cluster receives; a kustomize field the renderer does not know fails the check, and so
  does a file under deploy/kubernetes that nothing renders.
- Built-in kinds: kubernetes-validate's schemas, strict (an unknown field fails), for the oldest
  Kubernetes these manifests need and the newest the package knows. A kind it has no schema for
  fails (its command line only warns).
- Other kinds (KEDA, KServe, the Prometheus Operator): the published CRDs' schemas vendored in
  tests/kubernetes/crds (tests/kubernetes/vendor_crd.py), with jsonschema, as strictly as the API
  server's field validation: an unknown field fails, and so does a field that the vendored schema
  was trimmed of (vendor it again). A kind known neither way fails.
- What no schema sees: selectors against the pods' labels, probe and Service ports against the
  containers', the autoscalers' target, the adapter rule's metric against the HPA's, the flags
  against the binaries' own definitions (the CLI11 calls in the sources), one GPU per pod, and the
  grace period against the drain timings.
- And that it can fail: broken copies (a required field gone, a field misspelt, a selector that
  matches nothing) must each be refused, or the check fails.

The rendering is tests/kubernetes/kustomize_render.py's, the cross-references
tests/kubernetes/cross_references.py's. Runs itself with .venv's python (scripts/setup.sh installs
kubernetes-validate there). Exits 1 with every problem listed.
"""
import copy
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, '.venv', 'bin', 'python3')

try:
    import jsonschema
    import kubernetes_validate
except ImportError as missing:
    # Run by another python (meson's): go on in .venv's, which has them.
    if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, '.venv')):
        os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)
    sys.exit(f'check_kubernetes: {missing.name} is missing: scripts/setup.sh installs '
             'python/requirements-test.txt into .venv')

sys.path.insert(0, os.path.join(ROOT, 'tests', 'kubernetes'))
from cross_references import Checker, defined_flags  # noqa: E402
from kustomize_render import Failure, Renderer, load_yaml, rel  # noqa: E402

DEPLOY = os.path.join(ROOT, 'deploy', 'kubernetes')
CRD_DIR = os.path.join(ROOT, 'tests', 'kubernetes', 'crds')
# The oldest Kubernetes the manifests need (native sidecars and the preStop sleep action are on by
# default from 1.30) and the newest kubernetes-validate has schemas for.
KUBERNETES_VERSIONS = ('1.30.0', '1.37.0')
CLUSTER_SCOPED = {'Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PriorityClass', 'StorageClass'}

# --- schemas ------------------------------------------------------------------------------------

def strict_schema(node):
    """A CRD's structural schema as JSON Schema, refusing unknown fields as the API server's
    strict field validation does (kubectl apply's default)."""
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict_schema(value) for key, value in node.items()
           if not key.startswith('x-') and key not in ('nullable', 'format')}
    if node.get('x-kubernetes-int-or-string'):
        out.pop('type', None)
        out['anyOf'] = [{'type': 'integer'}, {'type': 'string'}]
    if 'properties' in node and 'additionalProperties' not in node \
            and not node.get('x-kubernetes-preserve-unknown-fields'):
        out['additionalProperties'] = False
    if node.get('nullable') and 'type' in out:
        out['type'] = [out['type'], 'null']
    return out


def trimmed_fields(schema, value, path=''):
    """Where an object sets a field that its vendored schema keeps by type only (vendor_crd.py
    trimmed it away as unused): there the schema no longer checks it, so it must be vendored anew."""
    if schema.get('x-vendor-trimmed'):
        return [path or '(top)']
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in schema.get('properties', {}):
                found += trimmed_fields(schema['properties'][key], item, f'{path}/{key}')
            elif isinstance(schema.get('additionalProperties'), dict):
                found += trimmed_fields(schema['additionalProperties'], item, f'{path}/{key}')
    elif isinstance(value, list) and isinstance(schema.get('items'), dict):
        for index, item in enumerate(value):
            found += trimmed_fields(schema['items'], item, f'{path}/{index}')
    return found


def load_crds():
    crds = {}
    for path in sorted(glob.glob(os.path.join(CRD_DIR, '*.yaml'))):
        crd = load_yaml(path)[0]
        key = (f"{crd['group']}/{crd['version']}", crd['kind'])
        crds[key] = {'scope': crd['scope'], 'path': rel(path), 'schema': crd['schema'],
                     'validator': jsonschema.Draft202012Validator(strict_schema(crd['schema']))}
    return crds


def schema_errors(doc, crds):
    """Every schema problem of one document, as strings."""
    key = (doc.get('apiVersion'), doc.get('kind'))
    errors = []
    if key in crds:
        crd = crds[key]
        errors += [f'{"/".join(map(str, e.absolute_path)) or "(top)"}: {e.message} ({crd["path"]})'
                   for e in crd['validator'].iter_errors(doc)]
        errors += [f'{field}: {crd["path"]} keeps only its type (trimmed as unused): vendor the CRD again '
                   '(tests/kubernetes/vendor_crd.py)' for field in trimmed_fields(crd['schema'], doc)]
        # The CRD leaves metadata to the API server: check it as any object's ObjectMeta.
        errors += builtin_errors({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': doc.get('metadata')})
        cluster_scoped = crd['scope'] == 'Cluster'
    else:
        errors += builtin_errors(doc)
        cluster_scoped = doc.get('kind') in CLUSTER_SCOPED
    namespace = (doc.get('metadata') or {}).get('namespace')
    if cluster_scoped and namespace:
        errors.append(f'{doc["kind"]} is cluster-scoped but names namespace {namespace}')
    if not cluster_scoped and not namespace:
        errors.append('names no namespace (each file must apply on its own with kubectl apply -f)')
    return errors


def builtin_errors(doc):
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f'{"/".join(map(str, e.absolute_path)) or "(top)"}: {e.message} '
                          f'(Kubernetes {e.version}, strict)')
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f'{e.message}, and no CRD schema in {rel(CRD_DIR)} names it')
    return errors


# --- the run ------------------------------------------------------------------------------------

def renderings(renderer):
    """(name, documents) for every kustomization, and the base with each component."""
    out = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, '**', 'kustomization.yaml'), recursive=True)):
        directory = os.path.dirname(path)
        if load_yaml(path)[0].get('kind') == 'Kustomization':
            out.append((rel(directory), renderer.render(directory)))
    components = sorted(os.path.relpath(os.path.dirname(p), DEPLOY) for p in
                        glob.glob(os.path.join(DEPLOY, 'components', '*', 'kustomization.yaml')))
    sets = [[c] for c in components] + [['components/workers', c] for c in components if c != 'components/workers']
    for chosen in sets:
        out.append((f'{rel(DEPLOY)} + {" + ".join(chosen)}', renderer.render(DEPLOY, extra_components=chosen)))
    return out


def coverage(renderer, checker):
    """Every file is rendered by some kustomization, and the two autoscalers cannot be combined
    (their patches both remove spec.replicas)."""
    for path in glob.glob(os.path.join(DEPLOY, '**', '*'), recursive=True):
        if os.path.isfile(path):
            checker.expect(path in renderer.read, rel(path), 'no kustomization renders it, so nothing checks it')
    try:
        renderer.render(DEPLOY, extra_components=['components/hpa', 'components/keda'])
        checker.expect(False, 'components/hpa + components/keda', 'renders, so both autoscalers could be applied')
    except Failure:
        checker.count += 1


def validate_documents(rendered, crds, checker):
    """Each distinct document against its schema, once; returns them."""
    seen = {}
    for _, docs in rendered:
        for doc, origin in docs:
            key = json.dumps(doc, sort_keys=True)
            if key in seen:
                continue
            seen[key] = doc
            label = f'{origin}: {doc.get("kind")} {(doc.get("metadata") or {}).get("name")}'
            for error in schema_errors(doc, crds):
                checker.expect(False, label, error)
            checker.count += 1
    return list(seen.values())


def check_all(crds, flags):
    renderer = Renderer()
    rendered = renderings(renderer)
    checker = Checker(flags)
    coverage(renderer, checker)
    all_docs = validate_documents(rendered, crds, checker)
    adapter_metrics = {}
    for doc in all_docs:
        if doc.get('kind') == 'ConfigMap' and 'config.yaml' in doc.get('data', {}) and \
                doc['metadata'].get('labels', {}).get('app.kubernetes.io/name') == 'prometheus-adapter':
            where = f'ConfigMap {doc["metadata"]["name"]}'
            adapter_metrics.update(checker.guarded(where, checker.adapter, where, doc) or {})
    checker.expect('avg_time_queue_us' in adapter_metrics, rel(DEPLOY), 'no prometheus-adapter rule serves '
                   'avg_time_queue_us')
    base = next(docs for name, docs in rendered if name == rel(DEPLOY))
    for name, docs in rendered:
        checker.guarded(name, checker.composition, name, docs, adapter_metrics, references=base)
    for hpa in [d for d in all_docs if d.get('kind') == 'HorizontalPodAutoscaler']:
        for scaled in [d for d in all_docs if d.get('kind') == 'ScaledObject']:
            checker.guarded('components/hpa, components/keda', checker.same_target,
                            'components/hpa and components/keda', hpa, scaled)
    services = [d for d in all_docs if d.get('kind') == 'InferenceService']
    for runtime in [d for d in all_docs if d.get('kind') == 'ClusterServingRuntime']:
        where = f'ClusterServingRuntime {runtime["metadata"]["name"]}'
        checker.guarded(where, checker.kserve, where, runtime, services)
    return checker, rendered, len(all_docs)


def self_checks(crds, flags, rendered):
    """Broken copies that must be refused: proof that the checks above can fail."""
    base = next(docs for name, docs in rendered if name == rel(DEPLOY))
    deployment = next(doc for doc, _ in base if doc['kind'] == 'Deployment')
    scaled = next(doc for _, docs in rendered for doc, _ in docs if doc['kind'] == 'ScaledObject')
    runtime = next(doc for _, docs in rendered for doc, _ in docs if doc['kind'] == 'ClusterServingRuntime')
    broken = []

    no_selector = copy.deepcopy(deployment)
    no_selector['spec'].pop('selector', None)
    broken.append(('a Deployment without its required spec.selector', schema_errors(no_selector, crds)))
    misspelt = copy.deepcopy(deployment)
    misspelt['spec']['template']['spec']['terminationGracePeriod'] = 90
    broken.append(('a Deployment with a misspelt field', schema_errors(misspelt, crds)))
    no_triggers = copy.deepcopy(scaled)
    no_triggers['spec'].pop('triggers', None)
    broken.append(('a ScaledObject without its required spec.triggers', schema_errors(no_triggers, crds)))
    misspelt_runtime = copy.deepcopy(runtime)
    misspelt_runtime['spec']['containers'][0]['readynessProbe'] = {}
    broken.append(('a ClusterServingRuntime with a misspelt container field', schema_errors(misspelt_runtime, crds)))
    unknown = {'apiVersion': 'example.com/v1', 'kind': 'Widget', 'metadata': {'name': 'w', 'namespace': 'n'}}
    broken.append(('a kind known neither to Kubernetes nor to a vendored CRD', schema_errors(unknown, crds)))

    def cross(docs):
        checker = Checker(flags)
        checker.guarded('self-check', checker.composition, 'self-check', docs,
                        {'avg_time_queue_us': {'series': set()}})
        return checker.errors

    wrong_service = [(copy.deepcopy(doc), origin) for doc, origin in base]
    next(doc for doc, _ in wrong_service if doc['kind'] == 'Service')['spec']['selector'] = {'app': 'nothing'}
    broken.append(('a Service whose selector matches no pod', cross(wrong_service)))
    wrong_flag = [(copy.deepcopy(doc), origin) for doc, origin in base]
    dep = next(doc for doc, _ in wrong_flag if doc['kind'] == 'Deployment')
    dep['spec']['template']['spec']['containers'][0].setdefault('args', []).append('--drain-dealy-ms')
    broken.append(('a front-end flag that does not exist', cross(wrong_flag)))
    short_grace = [(copy.deepcopy(doc), origin) for doc, origin in base]
    next(doc for doc, _ in short_grace if doc['kind'] == 'Deployment')['spec']['template']['spec'][
        'terminationGracePeriodSeconds'] = 30
    broken.append(('a grace period shorter than the drain', cross(short_grace)))
    return [what for what, errors in broken if not errors], len(broken)


def main():
    try:
        crds = load_crds()
        flags = defined_flags()
        checker, rendered, documents = check_all(crds, flags)
    except Failure as e:
        print(f'check_kubernetes: {e}')
        return 1
    try:
        passed_broken, broken = self_checks(crds, flags, rendered)
    except (StopIteration, KeyError, IndexError, TypeError) as e:
        checker.errors.append(f'self-check: not run ({type(e).__name__} {e}): it breaks copies of the base '
                              'Deployment and Service, the ScaledObject and the ClusterServingRuntime')
        passed_broken, broken = [], 0
    for what in passed_broken:
        checker.errors.append(f'self-check: {what} was not refused: the checks above cannot fail on it')
    if checker.errors:
        print(f'check_kubernetes: {len(checker.errors)} problems in {rel(DEPLOY)}:')
        for error in checker.errors:
            print(f'  {error}')
        return 1
    print(f'check_kubernetes: {rel(DEPLOY)} valid: {documents} distinct documents in {len(rendered)} renderings, '
          f'built-in kinds against Kubernetes {" and ".join(v.rsplit(".", 1)[0] for v in KUBERNETES_VERSIONS)} '
          f'(kubernetes-validate {kubernetes_validate.version.__version__}, strict), {len(crds)} CRD kinds '
          f'against {rel(CRD_DIR)}; {checker.count} checks; {broken} broken copies refused')
    return 0


if __name__ == '__main__':
    sys.exit(main())
