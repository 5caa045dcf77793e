#!/usr/bin/env python3
"""Vendors the schema of a published CustomResourceDefinition for tests/check_kubernetes.py.

    vendor_crd.py UPSTREAM_CRD.yaml SOURCE MANIFEST.yaml... > tests/kubernetes/crds/NAME.yaml

UPSTREAM_CRD.yaml is the project's CRD file as released (e.g. `git show v2.20.2:config/crd/bases/
keda.sh_scaledobjects.yaml` in a clone of kedacore/keda); SOURCE says where it came from, for the
header (repository, tag, commit, path). The schema of the CRD's storage version is kept without its
descriptions, and trimmed to what the MANIFESTs' objects of that kind use: every field they set
keeps its whole schema on the way down (types, enums, patterns, every `required` list), and the
fields beside them stay by name and type only (marked x-vendor-trimmed), so a misspelt field is
still refused at every level the manifests reach. tests/check_kubernetes.py fails where a manifest
sets a field the trimmed schema knows only by type: run this again to take in its schema.
"""
import sys

import yaml

# What a field the manifests do not set keeps of its schema; TRIMMED marks it, so that
# tests/check_kubernetes.py can tell a manifest that sets it that this file needs regenerating.
SHALLOW_KEYS = ('type', 'nullable', 'x-kubernetes-int-or-string', 'x-kubernetes-preserve-unknown-fields')
TRIMMED = 'x-vendor-trimmed'


def shallow(schema):
    return {**{key: schema[key] for key in SHALLOW_KEYS if key in schema}, TRIMMED: True}


def without_descriptions(node):
    if isinstance(node, dict):
        return {key: without_descriptions(value) for key, value in node.items() if key != 'description'}
    if isinstance(node, list):
        return [without_descriptions(item) for item in node]
    return node


def trim(schema, values):
    """schema, keeping in full only what the values (the instances found at this place) reach."""
    if not values:
        return shallow(schema)
    out = {key: without_descriptions(value) for key, value in schema.items()
           if key not in ('description', 'properties', 'items', 'additionalProperties')}
    if 'properties' in schema:
        objects = [value for value in values if isinstance(value, dict)]
        out['properties'] = {name: trim(sub, [obj[name] for obj in objects if name in obj])
                             for name, sub in schema['properties'].items()}
    if isinstance(schema.get('additionalProperties'), dict):
        inner = [item for value in values if isinstance(value, dict) for item in value.values()]
        out['additionalProperties'] = trim(schema['additionalProperties'], inner)
    elif 'additionalProperties' in schema:
        out['additionalProperties'] = schema['additionalProperties']
    if 'items' in schema:
        inner = [item for value in values if isinstance(value, list) for item in value]
        out['items'] = trim(schema['items'], inner)
    return out


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    crd_path, source, manifests = argv[1], argv[2], argv[3:]
    with open(crd_path, encoding='utf-8') as f:
        crd = yaml.safe_load(f)
    spec = crd['spec']
    kind = spec['names']['kind']
    version = next(v for v in spec['versions'] if v.get('storage', len(spec['versions']) == 1))
    objects = []
    for path in manifests:
        with open(path, encoding='utf-8') as f:
            objects += [doc for doc in yaml.safe_load_all(f)
                        if isinstance(doc, dict) and doc.get('kind') == kind
                        and doc.get('apiVersion') == f"{spec['group']}/{version['name']}"]
    if not objects:
        sys.exit(f'no {kind} ({spec["group"]}/{version["name"]}) in {" ".join(manifests)}')
    vendored = {
        'group': spec['group'],
        'version': version['name'],
        'kind': kind,
        'scope': spec['scope'],
        'schema': trim(version['schema']['openAPIV3Schema'], objects),
    }
    sys.stdout.write(
        f"# {kind} ({spec['group']}/{version['name']}): the openAPIV3Schema of the published CRD\n"
        f"#   {source}\n"
        "# without descriptions, trimmed by tests/kubernetes/vendor_crd.py to what these manifests set\n"
        "# (in full, with every required list on the way) and the fields beside it (by name and type,\n"
        f"# marked {TRIMMED}):\n"
        + ''.join(f"#   {path}\n" for path in manifests) +
        "# Read by tests/check_kubernetes.py; regenerate with vendor_crd.py (its docstring).\n")
    yaml.safe_dump(vendored, sys.stdout, sort_keys=False, default_flow_style=False, width=100)


if __name__ == '__main__':
    main(sys.argv)
