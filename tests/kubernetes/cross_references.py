"""What no schema sees in deploy/kubernetes: how the objects refer to each other and to batchd
itself (its flags, its metrics, its drain timings). Used by tests/check_kubernetes.py.
"""
import glob
import os
import re

import yaml

from kustomize_render import ROOT, Failure

GPU = 'nvidia.com/gpu'
# Where each binary's flags are defined (CLI11's add_option and add_flag).
FLAG_SOURCES = {
    'batchd': ['daemon/*.cpp', 'tracing/trace_options.cpp'],
    'batchd-http': ['frontend/*.cpp', 'frontend/*.hpp', 'oip/*.hpp', 'oip/*.cpp', 'tracing/trace_options.cpp'],
    'batchd-grpc': ['grpc_frontend/*.cpp', 'grpc_frontend/*.hpp', 'frontend/grant_flags.cpp', 'oip/*.hpp',
                    'oip/*.cpp', 'tracing/trace_options.cpp'],
    'batchd-worker': ['tools/worker*.cpp'],
    'batchctl': ['tools/batchctl*.cpp'],
}
FRONT_ENDS = ('batchd-http', 'batchd-grpc')
# The series the autoscalers read, as the daemon's metrics writer names them.
METRICS_SOURCE = 'status/status_metrics.cpp'
# The daemon's stop waits this long at most for clients that keep submitting (kStopGraceNs in
# daemon/daemon_shutdown.cpp), and a worker's running batches at most --device-timeout-ms (2 s by
# default).
DAEMON_STOP_S = 5
DEVICE_TIMEOUT_MS = 2000


def defined_flags():
    flags = {}
    for binary, patterns in FLAG_SOURCES.items():
        names = set()
        for pattern in patterns:
            for path in glob.glob(os.path.join(ROOT, pattern)):
                with open(path, encoding='utf-8') as f:
                    for spec in re.findall(r'add_(?:option|flag)\(\s*"([^"]+)"', f.read()):
                        names.update(name for name in spec.split(',') if name.startswith('--'))
        if not names:
            raise Failure(f'no flags of {binary} found in {patterns}')
        flags[binary] = names
    return flags


def arguments(argv):
    """--flag value pairs of a command line (--flag=value too); a flag alone maps to ''."""
    out, i = {}, 0
    while i < len(argv):
        token = argv[i]
        if token.startswith('--') and '=' in token:
            name, value = token.split('=', 1)
            out[name] = value
        elif token.startswith('--'):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith('--')
            out[token] = argv[i + 1] if has_value else ''
            i += has_value
        i += 1
    return out


def command_of(container):
    argv = list(container.get('command', [])) + list(container.get('args', []))
    return (os.path.basename(argv[0]) if argv else None), argv[1:]


def pod_containers(pod):
    return list(pod.get('initContainers', [])) + list(pod.get('containers', []))


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


class Checker:
    def __init__(self, flags):
        self.flags = flags
        self.errors = []
        self.count = 0

    def guarded(self, where, check, *args, **kwargs):
        """A cross-check on objects that may fail their schema too: a field it needs and does not
        find is one more problem, not a crash."""
        try:
            return check(*args, **kwargs)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, StopIteration) as e:
            self.errors.append(f'{where}: cross-references not checked: {type(e).__name__} {e}')
            return None

    def expect(self, ok, where, message):
        self.count += 1
        if not ok:
            self.errors.append(f'{where}: {message}')

    def command_lines(self, where, container):
        """Every batchd binary's flags exist; exec probes included."""
        lines = [command_of(container)]
        for probe in ('startupProbe', 'livenessProbe', 'readinessProbe'):
            exec_command = container.get(probe, {}).get('exec', {}).get('command')
            if exec_command:
                lines.append((os.path.basename(exec_command[0]), exec_command[1:]))
        for binary, argv in lines:
            if binary not in self.flags:
                continue
            for flag in arguments(argv):
                self.expect(flag in self.flags[binary], where,
                            f'{binary} has no flag {flag} (defined: {" ".join(FLAG_SOURCES[binary])})')

    def pod(self, where, pod, configmaps, namespace):
        """One pod's containers against each other: ports, volumes, environment, socket, GPU."""
        containers = pod_containers(pod)
        names = [c['name'] for c in containers]
        self.expect(len(names) == len(set(names)), where, f'container names repeat: {names}')
        volumes = {v['name'] for v in pod.get('volumes', [])}
        pod_ports = {p['containerPort'] for c in containers for p in c.get('ports', [])}
        sockets = set()
        for c in containers:
            here = f'{where} container {c["name"]}'
            self.probes(here, c, pod_ports)
            self.environment(here, c, configmaps, namespace)
            self.command_lines(here, c)
            mounts = {}
            for mount in c.get('volumeMounts', []):
                self.expect(mount['name'] in volumes, here, f'mounts volume {mount["name"]!r}, not in the pod')
                mounts[mount['mountPath']] = mount['name']
            binary, argv = command_of(c)
            socket = arguments(argv).get('--socket')
            if binary in self.flags and binary != 'batchctl':
                self.expect(socket is not None, here, f'{binary} without --socket')
            if socket is not None:
                sockets.add(socket)
                self.expect(os.path.dirname(socket) in mounts, here,
                            f'--socket {socket} is not in a volume the container mounts')
        self.expect(len(sockets) == 1, where, f'the containers name different sockets: {sorted(sockets)}')
        self.gpu(where, pod)

    def probes(self, where, container, pod_ports):
        """A probe's named port is one of its container's; a numbered one, one of the pod's."""
        own_ports = {p['name'] for p in container.get('ports', []) if 'name' in p}
        for probe_name in ('startupProbe', 'livenessProbe', 'readinessProbe'):
            probe = container.get(probe_name, {})
            for handler in ('httpGet', 'tcpSocket', 'grpc'):
                if handler not in probe:
                    continue
                port = probe[handler]['port']
                if isinstance(port, str):
                    self.expect(port in own_ports, where, f'{probe_name} port {port!r} is not a port name of '
                                f'this container ({sorted(own_ports)})')
                else:
                    self.expect(port in pod_ports, where, f'{probe_name} port {port} is no container port of '
                                f'the pod ({sorted(pod_ports)})')

    def environment(self, where, container, configmaps, namespace):
        """envFrom's ConfigMaps are rendered beside the pod; $(VAR) names a variable defined before."""
        defined = set()
        for source in container.get('envFrom', []):
            ref = source.get('configMapRef', {}).get('name')
            if ref is not None:
                self.expect((namespace, ref) in configmaps, where,
                            f'envFrom names ConfigMap {ref!r}, not rendered with it')
                defined |= set(configmaps.get((namespace, ref), {}))
        for env in container.get('env', []):
            for ref in re.findall(r'\$\(([A-Za-z_][A-Za-z0-9_]*)\)', env.get('value', '')):
                self.expect(ref in defined, where, f'{env["name"]} refers to $({ref}), not defined before it')
            defined.add(env['name'])

    def gpu(self, where, pod):
        """One pod per GPU: the pod holds one, in the container that runs the model on it."""
        containers = pod_containers(pod)
        holders = [(c, int(c['resources']['limits'][GPU])) for c in containers
                   if c.get('resources', {}).get('limits', {}).get(GPU)]
        total = sum(n for _, n in holders)
        self.expect(total == 1, where, f'{GPU} limits add up to {total}, not 1')
        for c, _ in holders:
            binary, argv = command_of(c)
            backend = arguments(argv).get('--backend')
            self.expect(binary not in ('batchd', 'batchd-worker') or backend == 'cuda', where,
                        f'{c["name"]} holds the GPU but runs {binary} --backend {backend}')
        for c in containers:
            binary, argv = command_of(c)
            if binary == 'batchd' and arguments(argv).get('--backend') == 'workers':
                self.expect(any(holder is not c for holder, _ in holders), where,
                            'batchd --backend workers, and no worker container holds the GPU')
        self.expect(any(t.get('key') == GPU and t.get('operator') == 'Exists' for t in pod.get('tolerations', [])),
                    where, f'no toleration of the {GPU} taint')

    def drain_s(self, container):
        """The longest a front-end takes to stop, from its SIGTERM's sending (its preStop's start)."""
        args = arguments(command_of(container)[1])
        sleep = container.get('lifecycle', {}).get('preStop', {}).get('sleep', {}).get('seconds', 0)
        delay_ms = int(args.get('--drain-delay-ms', 0))
        timeout_ms = int(args.get('--drain-timeout-ms', 0)) or int(args.get('--max-timeout-ms', 60000)) + 1000
        return sleep + (delay_ms + timeout_ms) / 1000

    def grace(self, where, pod, grace_s, daemon_is_sidecar):
        """terminationGracePeriodSeconds covers the front-ends' drain and then the daemon's stop."""
        containers = pod_containers(pod)
        front_ends = [c for c in containers if command_of(c)[0] in FRONT_ENDS]
        daemon = next(c for c in containers if command_of(c)[0] == 'batchd')
        self.expect(front_ends, where, 'no front-end')
        drain = max(self.drain_s(c) for c in front_ends)
        workers = [c for c in containers if command_of(c)[0] == 'batchd-worker']
        device_timeout_ms = int(arguments(command_of(daemon)[1]).get('--device-timeout-ms', DEVICE_TIMEOUT_MS))
        worker_s = device_timeout_ms / 1000 if workers else 0
        daemon_sleep = daemon.get('lifecycle', {}).get('preStop', {}).get('sleep', {}).get('seconds', 0)
        if daemon_is_sidecar:
            need = drain + worker_s + DAEMON_STOP_S
            self.expect(daemon.get('restartPolicy') == 'Always' and daemon in pod.get('initContainers', []), where,
                        'the daemon is not a native sidecar, so it would stop with the front-ends')
        else:
            # The daemon stops on its own SIGTERM: it must outlast the front-ends' intake.
            intake = max(c.get('lifecycle', {}).get('preStop', {}).get('sleep', {}).get('seconds', 0)
                         + int(arguments(command_of(c)[1]).get('--drain-delay-ms', 0)) / 1000 for c in front_ends)
            self.expect(daemon_sleep > intake, where, f'the daemon\'s preStop sleep ({daemon_sleep} s) ends '
                        f'before the front-ends stop taking work ({intake} s)')
            need = max(drain, daemon_sleep + DAEMON_STOP_S)
        self.expect(grace_s is not None and grace_s >= need, where,
                    f'terminationGracePeriodSeconds {grace_s} < {need:g} s that the drain takes')

    def composition(self, name, docs, adapter_metrics, references=()):
        """The cross-references within one rendering (kubectl apply -k of one folder or overlay);
        references: the base's objects, which a folder applied beside it (monitoring/) points at."""
        by_kind = {}
        for doc, _ in docs:
            by_kind.setdefault(doc['kind'], []).append(doc)
        configmaps = {(d['metadata'].get('namespace'), d['metadata']['name']): d.get('data', {})
                      for d in by_kind.get('ConfigMap', [])}
        own = {(d['metadata']['namespace'], d['metadata']['name']): d for d in by_kind.get('Deployment', [])}
        deployments = dict(own)
        for doc, _ in references:
            if doc['kind'] == 'Deployment':
                deployments.setdefault((doc['metadata']['namespace'], doc['metadata']['name']), doc)
        scalers = by_kind.get('HorizontalPodAutoscaler', []) + by_kind.get('ScaledObject', [])
        for (namespace, dname), dep in own.items():
            self.deployment(f'{name}: Deployment {dname}', dep, configmaps, namespace, autoscaled=bool(scalers))
        for selecting in by_kind.get('Service', []) + by_kind.get('PodDisruptionBudget', []) + \
                by_kind.get('PodMonitor', []):
            self.selecting(f'{name}: {selecting["kind"]} {selecting["metadata"]["name"]}', selecting, deployments)
        for scaler in scalers:
            self.scaler(f'{name}: {scaler["kind"]} {scaler["metadata"]["name"]}', scaler, deployments,
                        adapter_metrics)

    def deployment(self, where, dep, configmaps, namespace, autoscaled):
        template = dep['spec']['template']
        pod = template['spec']
        self.expect(labels_match(dep['spec']['selector'].get('matchLabels'), template['metadata'].get('labels', {})),
                    where, 'its selector does not match its pod labels')
        self.pod(where, pod, configmaps, namespace)
        self.grace(where, pod, pod.get('terminationGracePeriodSeconds'), daemon_is_sidecar=True)
        http = next(c for c in pod_containers(pod) if command_of(c)[0] == 'batchd-http')
        http_ports = {str(p['containerPort']) for p in http.get('ports', [])}
        self.expect(template['metadata'].get('annotations', {}).get('prometheus.io/port') in http_ports, where,
                    'prometheus.io/port is not batchd-http\'s port')
        self.expect(not autoscaled or 'replicas' not in dep['spec'], where,
                    'an autoscaler owns the count, yet spec.replicas is set (kubectl apply resets it)')

    def selecting(self, where, obj, deployments):
        """A Service, PodDisruptionBudget or PodMonitor selects the pods, and their ports."""
        spec = obj['spec']
        selector = spec['selector'] if obj['kind'] == 'Service' else spec['selector'].get('matchLabels')
        pods = [d['spec']['template'] for (ns, _), d in deployments.items() if ns == obj['metadata']['namespace']
                and labels_match(selector, d['spec']['template']['metadata'].get('labels', {}))]
        self.expect(pods, where, 'its selector matches no Deployment\'s pods')
        for template in pods:
            port_names = {p['name'] for c in pod_containers(template['spec']) for p in c.get('ports', [])}
            for port in spec.get('ports', []):
                target = port.get('targetPort', port['port'])
                self.expect(not isinstance(target, str) or target in port_names, where,
                            f'targetPort {target!r} is no container port name ({sorted(port_names)})')
            for endpoint in spec.get('podMetricsEndpoints', []):
                self.expect(endpoint.get('port') in port_names, where,
                            f'port {endpoint.get("port")!r} is no container port name')
                path = template['metadata'].get('annotations', {}).get('prometheus.io/path')
                self.expect(endpoint.get('path') == path, where,
                            f'scrapes {endpoint.get("path")}, the pods say prometheus.io/path {path}')

    def scaler(self, where, scaler, deployments, adapter_metrics):
        """An HPA or ScaledObject aims at a Deployment, and reads what the adapter rule serves."""
        spec = scaler['spec']
        ref = spec['scaleTargetRef']
        self.expect(ref.get('kind', 'Deployment') == 'Deployment'
                    and (scaler['metadata']['namespace'], ref['name']) in deployments, where,
                    f'scaleTargetRef {ref} names no Deployment rendered with it')
        low = spec.get('minReplicas', spec.get('minReplicaCount', 1))
        high = spec.get('maxReplicas', spec.get('maxReplicaCount', 100))
        self.expect(low <= high, where, f'min {low} > max {high}')
        for metric in spec.get('metrics', []):
            if metric['type'] == 'Pods':
                wanted = metric['pods']['metric']['name']
                self.expect(wanted in adapter_metrics, where, f'asks for {wanted}, which no '
                            f'prometheus-adapter rule serves ({sorted(adapter_metrics)})')
        for trigger in spec.get('triggers', []):
            if trigger['type'] == 'prometheus':
                series = set(re.findall(r'\b(nv_inference_\w+|batchd_\w+)\{', trigger['metadata']['query']))
                self.expect(series and series == adapter_metrics.get('avg_time_queue_us', {}).get('series'),
                            where, f'its query reads {sorted(series)}, not the adapter rule\'s series')

    def same_target(self, where, hpa, scaled):
        """The two autoscaling components act at the same point."""
        hpa_target = next(m['pods']['target']['averageValue'] for m in hpa['spec']['metrics'] if m['type'] == 'Pods')
        for trigger in scaled['spec']['triggers']:
            self.expect(float(trigger['metadata']['threshold']) == float(hpa_target), where,
                        f'KEDA\'s threshold {trigger["metadata"]["threshold"]} is not the HPA\'s {hpa_target}')
        for key in ('minReplicas', 'maxReplicas'):
            self.expect(hpa['spec'][key] == scaled['spec'][key.replace('Replicas', 'ReplicaCount')], where,
                        f'HPA {key} differs from the ScaledObject\'s')
        self.expect(hpa['spec'].get('behavior') == scaled['spec']['advanced']['horizontalPodAutoscalerConfig']
                    .get('behavior'), where, 'the HPA\'s behavior differs from the ScaledObject\'s')

    def adapter(self, where, configmap):
        """prometheus-adapter's rules: the metrics they serve, and the series they read."""
        config = yaml.safe_load(configmap['data']['config.yaml'])
        with open(os.path.join(ROOT, METRICS_SOURCE), encoding='utf-8') as f:
            emitted = f.read()
        served = {}
        for rule in config.get('rules', []):
            for key in ('seriesQuery', 'resources', 'name', 'metricsQuery'):
                self.expect(key in rule, where, f'a rule without {key}')
            overrides = rule.get('resources', {}).get('overrides', {})
            self.expect(overrides.get('pod', {}).get('resource') == 'pod'
                        and overrides.get('namespace', {}).get('resource') == 'namespace', where,
                        'the rule does not map the namespace and pod labels: a Pods metric needs both')
            query = rule.get('metricsQuery', '')
            for placeholder in ('<<.LabelMatchers>>', '<<.GroupBy>>'):
                self.expect(placeholder in query, where, f'metricsQuery without {placeholder}')
            series = set(re.findall(r'\b(nv_inference_\w+|batchd_\w+)\{', query))
            for name in series | set(re.findall(r'^(\w+)\{', rule.get('seriesQuery', ''))):
                self.expect(f'"{name}"' in emitted, where, f'{name} is not a series {METRICS_SOURCE} writes')
            served[rule.get('name', {}).get('as')] = {'series': series}
        return served

    def kserve(self, where, runtime, services):
        spec = runtime['spec']
        names = [c['name'] for c in spec['containers']]
        self.expect('kserve-container' in names, where, 'no kserve-container (KServe routes to it)')
        self.pod(where, spec, {}, None)
        front = next((c for c in spec['containers'] if c['name'] == 'kserve-container'), {})
        self.expect(command_of(front)[0] == 'batchd-http', where, 'kserve-container is not batchd-http')
        for isvc in services:
            model = isvc['spec']['predictor']['model']
            if model.get('runtime') != runtime['metadata']['name']:
                continue
            here = f'{where} with InferenceService {isvc["metadata"]["name"]}'
            formats = {f['name'] for f in spec.get('supportedModelFormats', [])}
            self.expect(model['modelFormat']['name'] in formats, here, 'its modelFormat is not the runtime\'s')
            self.grace(here, spec, isvc['spec']['predictor'].get('terminationGracePeriodSeconds'),
                       daemon_is_sidecar=False)
