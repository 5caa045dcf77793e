"""Renders a kustomize folder as kubectl apply -k does, for the fields deploy/kubernetes uses:
resources (files and folders), components, and patches in JSON 6902 form with a target. Anything
else (a strategic-merge patch, a field of a kustomization it does not know) is a Failure rather
than something silently left out. Used by tests/check_kubernetes.py.
"""
import copy
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUSTOMIZE_FIELDS = {'apiVersion', 'kind', 'resources', 'components', 'patches'}


class Failure(Exception):
    """A file that cannot be rendered, so nothing in it can be checked."""


def rel(path):
    return os.path.relpath(path, ROOT)


def load_yaml(path):
    with open(path, encoding='utf-8') as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def json_pointer(path):
    if not path.startswith('/'):
        raise Failure(f'JSON patch path {path!r} does not start with /')
    return [part.replace('~1', '/').replace('~0', '~') for part in path[1:].split('/')]


def apply_json_patch(doc, ops, where):
    """RFC 6902 (add, remove, replace, test), as kustomize applies a patch file that is a list."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = json_pointer(op['path'])
        parent = doc
        try:
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            last = parts[-1]
            if isinstance(parent, list):
                index = len(parent) if last == '-' else int(last)
                if op['op'] == 'add':
                    parent.insert(index, copy.deepcopy(op['value']))
                elif op['op'] == 'remove':
                    del parent[index]
                elif op['op'] == 'replace':
                    parent[index] = copy.deepcopy(op['value'])
                elif op['op'] == 'test':
                    if parent[index] != op['value']:
                        raise Failure(f'{where}: test {op["path"]} == {op["value"]!r} fails')
                else:
                    raise Failure(f'{where}: op {op["op"]!r} is not rendered by this check')
            else:
                if op['op'] == 'add':
                    parent[last] = copy.deepcopy(op['value'])
                elif op['op'] == 'remove':
                    del parent[last]
                elif op['op'] == 'replace':
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op['value'])
                elif op['op'] == 'test':
                    if parent.get(last) != op['value']:
                        raise Failure(f'{where}: test {op["path"]} == {op["value"]!r} fails')
                else:
                    raise Failure(f'{where}: op {op["op"]!r} is not rendered by this check')
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise Failure(f'{where}: {op["op"]} {op["path"]}: no such place ({e!r})') from None
    return doc


def objects(path):
    """The Kubernetes objects of one resource file."""
    docs = load_yaml(path)
    for doc in docs:
        if not (isinstance(doc, dict) and isinstance(doc.get('apiVersion'), str) and doc.get('kind')
                and isinstance(doc.get('metadata'), dict) and doc['metadata'].get('name')):
            raise Failure(f'{rel(path)}: a document without apiVersion, kind and metadata.name')
    return [(doc, rel(path)) for doc in docs]


def matches_target(doc, target):
    api_group, _, api_version = doc['apiVersion'].rpartition('/')
    return (target.get('kind', doc['kind']) == doc['kind']
            and target.get('name', doc['metadata']['name']) == doc['metadata']['name']
            and target.get('group', api_group) == api_group
            and target.get('version', api_version) == api_version)


class Renderer:
    """Renders kustomizations; remembers every file it read, so that none is left unchecked."""

    def __init__(self):
        self.read = set()

    def kustomization(self, directory, kind):
        path = os.path.join(directory, 'kustomization.yaml')
        docs = load_yaml(path)
        self.read.add(path)
        if len(docs) != 1 or docs[0].get('kind') != kind:
            raise Failure(f'{rel(path)}: expected one {kind}')
        unknown = set(docs[0]) - KUSTOMIZE_FIELDS
        if unknown:
            raise Failure(f'{rel(path)}: {sorted(unknown)}: kustomize fields this check does not render')
        return docs[0]

    def render(self, directory, kind='Kustomization', extra_components=()):
        k = self.kustomization(directory, kind)
        docs = []
        for resource in k.get('resources', []):
            path = os.path.normpath(os.path.join(directory, resource))
            if os.path.isdir(path):
                docs += self.render(path)
            else:
                self.read.add(path)
                docs += objects(path)
        for component in list(k.get('components', [])) + list(extra_components):
            docs = self.component(os.path.normpath(os.path.join(directory, component)), docs)
        return self.patch(directory, k, docs)

    def component(self, directory, docs):
        k = self.kustomization(directory, 'Component')
        for resource in k.get('resources', []):
            path = os.path.normpath(os.path.join(directory, resource))
            self.read.add(path)
            docs = docs + objects(path)
        return self.patch(directory, k, docs)

    def patch(self, directory, k, docs):
        for entry in k.get('patches', []):
            if 'path' in entry:
                path = os.path.normpath(os.path.join(directory, entry['path']))
                self.read.add(path)
                where = rel(path)
                patch_docs = load_yaml(path)
                if len(patch_docs) != 1:
                    raise Failure(f'{where}: a patch file holds one patch, not {len(patch_docs)}')
                ops = patch_docs[0]
            else:
                where = rel(directory) + ' (inline patch)'
                ops = yaml.safe_load(entry['patch'])
            if not isinstance(ops, list):
                raise Failure(f'{where}: a strategic-merge patch; this check renders JSON 6902 patches only')
            hits = 0
            for i, (doc, origin) in enumerate(docs):
                if matches_target(doc, entry.get('target', {})):
                    docs[i] = (apply_json_patch(doc, ops, where), f'{origin} + {where}')
                    hits += 1
            if hits == 0:
                raise Failure(f'{where}: its target {entry.get("target")} matches no object')
        return docs
