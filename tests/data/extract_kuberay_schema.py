"""Cuts the part of KubeRay's RayCluster CRD that deploy/kuberay/raycluster.yaml uses.

The CRD (ray-operator/config/crd/bases/ray.io_rayclusters.yaml, 17,000+ lines) is too big to
vendor; tests/test_cluster_manifests.py needs only the ray.io/v1 schema along the paths our
manifest fills in. Along those paths every field is kept as KubeRay wrote it (types, `required`,
defaults, patterns; descriptions dropped); everywhere else a field keeps only its type and
required keys, so a typo'd or missing field is still caught. To refresh it from a KubeRay
checkout (the commit goes into the header):

  git -C kuberay show HEAD:ray-operator/config/crd/bases/ray.io_rayclusters.yaml > crd.yaml
  python tests/data/extract_kuberay_schema.py crd.yaml $(git -C kuberay rev-parse HEAD) \
    > tests/data/kuberay_raycluster_v1_schema.yaml
"""

import sys

import yaml

SOURCE = "ray-operator/config/crd/bases/ray.io_rayclusters.yaml"
# Properties whose schema is kept whole, at any depth; others are cut to their type.
DESCEND = frozenset({
    "spec", "headGroupSpec", "workerGroupSpecs", "template", "rayStartParams", "rayVersion",
    "authOptions", "enableInTreeAutoscaling", "groupName", "replicas", "minReplicas",
    "maxReplicas", "numOfHosts", "suspend", "containers", "name", "image", "env", "value",
    "valueFrom", "secretKeyRef", "key", "optional", "resources", "limits", "requests", "ports",
    "containerPort", "protocol", "volumeMounts", "mountPath", "readOnly", "serviceAccountName",
    "nodeSelector", "tolerations", "operator", "effect", "tolerationSeconds",
})
_STUB_KEYS = ("type", "required", "x-kubernetes-preserve-unknown-fields",
              "x-kubernetes-int-or-string", "anyOf")


def _stub(schema: dict) -> dict:
  """A field we do not fill in: its type and its required keys (one level)."""
  out = {k: schema[k] for k in _STUB_KEYS if k in schema}
  if schema.get("type") == "array" and "items" in schema:
    out["items"] = _stub(schema["items"])
  return out


def _keep(schema: dict) -> dict:
  """A field on our path: everything but the prose, its properties kept or stubbed."""
  out = {}
  for key, value in schema.items():
    if key == "description":
      continue
    if key == "properties":
      out[key] = {name: _keep(sub) if name in DESCEND else _stub(sub)
                  for name, sub in value.items()}
    elif key in ("items", "additionalProperties") and isinstance(value, dict):
      out[key] = _keep(value)
    else:
      out[key] = value
  return out


def extract(crd: dict) -> dict:
  version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
  return _keep(version["schema"]["openAPIV3Schema"])


def main(crd_path: str, commit: str) -> None:
  with open(crd_path, encoding="utf-8") as f:
    crd = yaml.safe_load(f)
  print(f"# KubeRay's RayCluster CRD, ray.io/v1 openAPIV3Schema, cut to the fields that\n"
        f"# deploy/kuberay/raycluster.yaml uses (the rest: type and required keys only).\n"
        f"# Source: github.com/ray-project/kuberay, {SOURCE}\n"
        f"# at commit {commit}; made by tests/data/extract_kuberay_schema.py.")
  yaml.safe_dump(extract(crd), sys.stdout, sort_keys=True, width=100, default_flow_style=None)


if __name__ == "__main__":
  main(*sys.argv[1:])
