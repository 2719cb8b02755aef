"""The cluster manifests users launch: deploy/ray/cluster-gpu.yaml (`ray up`) and
deploy/kuberay/raycluster.yaml (KubeRay), checked offline.

`ray up` validates its config with Ray's schema before it touches a cloud; KubeRay's CRD and
operator refuse a RayCluster without the fields they require. Both checks run here, without a
network or credentials, so a manifest that Ray or KubeRay would refuse, that runs another image
than `nascli build` makes, or that leaves a node without the Ray token, fails the suite instead of
a user's first cluster.
"""

import copy
import json
import pathlib
import re
import tomllib

import jsonschema
from packaging import requirements
from packaging import version
import pytest
import yaml

from nascli import containers

ROOT = pathlib.Path(__file__).resolve().parents[1]
RAY_UP = ROOT / "deploy" / "ray" / "cluster-gpu.yaml"
KUBERAY = ROOT / "deploy" / "kuberay" / "raycluster.yaml"
# KubeRay's RayCluster CRD (ray.io/v1), cut to the fields our manifest uses; its header names the
# KubeRay commit it came from (tests/data/extract_kuberay_schema.py).
KUBERAY_SCHEMA = ROOT / "tests" / "data" / "kuberay_raycluster_v1_schema.yaml"
KUBERAY_COMMIT = "feeaf72facab4881ba2b179248bb67315634e229"  # v1.7.0-rc.0-5, in v1.7.0
# The example of docs/commands/build.md; the manifests name its image.
BUILD = containers.BuildArgs(project_id="my-proj", region="us-central1",
                             trainer_docker_id="nas-trainer", push=False)
TOKEN_SECRET = ("nascli-ray-auth", "auth_token")
# KubeRay probes a Ray of 2.53 or later over HTTP (ray-operator/controllers/ray/common/pod.go,
# supportsUnifiedHealthCheck); an older rayVersion gets `wget` probes, which need wget in the
# image. Ray token authentication with RAY_AUTH_TOKEN is newer still than 2.52.
MIN_RAY = version.Version("2.53.0")


def _load(path: pathlib.Path) -> dict:
  with open(path, encoding="utf-8") as f:
    return yaml.safe_load(f)


def _trainer_uri() -> str:
  """The trainer image `nascli build` pushes for the docs' example, from nascli's own code."""
  images, _ = containers.plan(BUILD)
  (trainer,) = [i for i in images if i.role == "trainer"]
  return trainer.uri


def _project_ray() -> requirements.Requirement:
  """The Ray of pyproject.toml's `ray` extra, which the trainer image installs."""
  with open(ROOT / "pyproject.toml", "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]["ray"]
  (ray_req,) = [r for r in map(requirements.Requirement, extras) if r.name == "ray"]
  return ray_req


# --- deploy/ray/cluster-gpu.yaml: `ray up` ------------------------------------------------


@pytest.fixture(scope="module")
def ray_up() -> dict:
  return _load(RAY_UP)


@pytest.fixture(scope="module")
def prepared(ray_up) -> dict:
  """The config as `ray up` prepares it (Ray's defaults for the provider merged in, setup
  commands merged) before it asks a cloud for anything."""
  from ray.autoscaler._private import util  # pylint: disable=g-import-not-at-top
  return util.prepare_config(copy.deepcopy(ray_up))


def test_ray_up_config_matches_the_installed_rays_schema(ray_up):
  import ray.autoscaler  # pylint: disable=g-import-not-at-top
  schema_path = pathlib.Path(ray.autoscaler.__file__).parent / "ray-schema.json"
  schema = json.loads(schema_path.read_text(encoding="utf-8"))
  jsonschema.validate(ray_up, schema)
  # The schema bites: a misspelled top-level or docker field is refused (additionalProperties).
  with pytest.raises(jsonschema.ValidationError):
    jsonschema.validate({**ray_up, "dockr": ray_up["docker"]}, schema)


def test_ray_up_config_passes_rays_own_validation(prepared):
  """What `ray up` runs before the cloud provider's bootstrap (commands._bootstrap_config):
  prepare_config, then validate_config; both read only local files."""
  from ray.autoscaler._private import util  # pylint: disable=g-import-not-at-top
  util.validate_config(prepared)
  assert prepared["head_node_type"] == "head"
  assert prepared["available_node_types"]["gpu_worker"]["max_workers"] == 8
  broken = copy.deepcopy(prepared)
  broken["head_node_type"] = "no_such_type"
  with pytest.raises(ValueError, match="head_node_type"):
    util.validate_config(broken)


def test_ray_up_runs_every_node_in_the_trainer_image(ray_up, prepared):
  docker = ray_up["docker"]
  assert docker["image"] == _trainer_uri()
  for key in ("head_image", "worker_image"):
    assert docker.get(key, docker["image"]) == docker["image"]
  for node_type in ray_up["available_node_types"].values():
    assert "worker_image" not in node_type.get("docker", {})
  # The image's entry point is the trial process; Ray's `docker run IMAGE bash` needs it reset.
  dockerfile = (ROOT / containers.TRAINER_DOCKERFILE).read_text(encoding="utf-8")
  assert 'ENTRYPOINT ["python", "-m", "nascli.search.trial"]' in dockerfile
  assert '--entrypoint=""' in docker["run_options"]
  # Nothing installs another Ray over the image's (Ray's default setup installs a nightly).
  commands = prepared["head_setup_commands"] + prepared["worker_setup_commands"]
  assert not [c for c in commands if re.search(r"\bpip install\b.*\bray\b", c)], commands


def test_ray_up_nodes_can_pull_the_image(ray_up):
  """Each VM's docker logs in to the image's registry before its container starts; a node
  type's own initialization_commands replace the global ones (autoscaler.py,
  _get_node_type_specific_fields), so each list must have it."""
  registry_host = ray_up["docker"]["image"].split("/", 1)[0]
  login = f"gcloud auth configure-docker {registry_host} --quiet"
  assert login in ray_up["initialization_commands"]  # the head uses the global list
  for name, node_type in ray_up["available_node_types"].items():
    assert login in node_type.get("initialization_commands",
                                  ray_up["initialization_commands"]), name


def test_ray_up_passes_the_token_to_every_node(ray_up, prepared):
  """Token mode in every container, the launching machine's ~/.ray (auth_token) in every
  container's ~/.ray: file_mounts go to the head, and the head passes them on to each worker it
  starts (commands._set_up_config_for_head_node)."""
  run_options = ray_up["docker"]["run_options"]
  assert "--env RAY_AUTH_MODE=token" in run_options
  for node_type in ray_up["available_node_types"].values():
    assert "run_options" not in node_type.get("docker", {})
  assert prepared["file_mounts"] == {"~/.ray": "~/.ray"}
  for commands in (ray_up["head_start_ray_commands"], ray_up["worker_start_ray_commands"]):
    assert not [c for c in commands if "RAY_AUTH_MODE=disabled" in c]


def test_ray_up_gpu_workers_get_their_gpu_and_the_bucket(ray_up):
  head = ray_up["available_node_types"][ray_up["head_node_type"]]
  assert head["resources"].get("GPU", 0) == 0 and head["resources"]["CPU"] == 0
  worker = ray_up["available_node_types"]["gpu_worker"]
  config = worker["node_config"]
  gpus = sum(a["acceleratorCount"] for a in config["guestAccelerators"])
  assert worker["resources"]["GPU"] == gpus == 1
  assert "--gpus all" in ray_up["docker"]["worker_run_options"]
  assert {"onHostMaintenance": "TERMINATE"} in config["scheduling"]  # GCE: GPUs cannot migrate
  # Ray gives only the head its service account (gcp/config.py, _configure_iam_role); the
  # workers write the job dir on gs:// as the same one.
  project = ray_up["provider"]["project_id"]
  (account,) = config["serviceAccounts"]
  assert account["email"] == f"ray-autoscaler-sa-v1@{project}.iam.gserviceaccount.com"
  assert "https://www.googleapis.com/auth/cloud-platform" in account["scopes"]
  assert f"/{project}/" in ray_up["docker"]["image"]


def test_ray_up_start_commands_join_the_head(ray_up):
  head = " ".join(ray_up["head_start_ray_commands"])
  worker = " ".join(ray_up["worker_start_ray_commands"])
  port = re.search(r"--port=(\d+)", head).group(1)
  assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head
  assert f"--address=$RAY_HEAD_IP:{port}" in worker


# --- deploy/kuberay/raycluster.yaml: KubeRay ---------------------------------------------


@pytest.fixture(scope="module")
def raycluster() -> dict:
  return _load(KUBERAY)


def _strict(schema: dict) -> dict:
  """The CRD's schema as `kubectl apply` (field validation strict) reads it: a field the schema
  does not know is an error, not silently pruned."""
  schema = copy.deepcopy(schema)
  def visit(node):
    if isinstance(node, dict):
      if ("properties" in node and "additionalProperties" not in node
          and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
      for value in node.values():
        visit(value)
    elif isinstance(node, list):
      for value in node:
        visit(value)
  visit(schema)
  return schema


def _groups(raycluster: dict) -> list[tuple[str, dict]]:
  spec = raycluster["spec"]
  return [("head", spec["headGroupSpec"])] + [(g["groupName"], g)
                                              for g in spec["workerGroupSpecs"]]


def test_kuberay_schema_extract_names_its_source():
  header = KUBERAY_SCHEMA.read_text(encoding="utf-8").split("\nproperties:", 1)[0]
  assert KUBERAY_COMMIT in header
  assert "ray-operator/config/crd/bases/ray.io_rayclusters.yaml" in header


def test_kuberay_manifest_matches_the_crd_schema(raycluster):
  schema = _strict(_load(KUBERAY_SCHEMA))
  jsonschema.validate(raycluster, schema)
  # What the CRD requires (KubeRay at KUBERAY_COMMIT): spec.headGroupSpec; a group's template;
  # the pod's containers, each with a name; a worker group's groupName, minReplicas,
  # maxReplicas and template. Without any of them the schema refuses the manifest.
  spec = schema["properties"]["spec"]
  assert spec["required"] == ["headGroupSpec"]
  workers = spec["properties"]["workerGroupSpecs"]["items"]
  assert sorted(workers["required"]) == ["groupName", "maxReplicas", "minReplicas", "template"]
  for path in (("spec", "headGroupSpec"), ("spec", "workerGroupSpecs", 0, "groupName"),
               ("spec", "workerGroupSpecs", 0, "maxReplicas"),
               ("spec", "headGroupSpec", "template", "spec", "containers", 0, "name")):
    broken = copy.deepcopy(raycluster)
    node = broken
    for key in path[:-1]:
      node = node[key]
    del node[path[-1]]
    with pytest.raises(jsonschema.ValidationError):
      jsonschema.validate(broken, schema)
  typo = copy.deepcopy(raycluster)
  typo["spec"]["workerGroupSpecs"][0]["maxReplica"] = 8
  with pytest.raises(jsonschema.ValidationError):
    jsonschema.validate(typo, schema)


def test_kuberay_manifest_passes_the_operators_checks(raycluster):
  """ray-operator/controllers/ray/utils/validation.go at KUBERAY_COMMIT: the name is a DNS-1035
  label of at most 53 characters; every group has a container (the Ray container is the first,
  RayContainerIndex 0); without autoscaling a worker group sets minReplicas and maxReplicas,
  0 <= min <= max."""
  assert raycluster["apiVersion"] == "ray.io/v1" and raycluster["kind"] == "RayCluster"
  name = raycluster["metadata"]["name"]
  assert len(name) <= 53 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
  spec = raycluster["spec"]
  for group_name, group in _groups(raycluster):
    assert group["template"]["spec"]["containers"], group_name
    assert "rayStartParams" in group, group_name  # required by KubeRay before 1.2; harmless
  names = [g["groupName"] for g in spec["workerGroupSpecs"]]
  assert len(names) == len(set(names))
  for group in spec["workerGroupSpecs"]:
    assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_kuberay_runs_the_trainer_image_with_the_token_everywhere(raycluster):
  uri = _trainer_uri()
  for group_name, group in _groups(raycluster):
    pod = group["template"]["spec"]
    for container in pod["containers"] + pod.get("initContainers", []):
      where = f"{group_name}/{container['name']}"
      env = {e["name"]: e for e in container.get("env", [])}
      assert env["RAY_AUTH_MODE"].get("value") == "token", where
      ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
      assert (ref["name"], ref["key"]) == TOKEN_SECRET, where
      assert "value" not in env["RAY_AUTH_TOKEN"], where  # never the token itself
    assert pod["containers"][0]["image"] == uri, group_name
    assert pod["serviceAccountName"] == "nascli-ray", group_name  # gs:// by Workload Identity
  # KubeRay's autoscaler is one more container, with its own env (autoscalerOptions.env).
  spec = raycluster["spec"]
  if spec.get("enableInTreeAutoscaling"):
    env = {e["name"]: e for e in spec.get("autoscalerOptions", {}).get("env", [])}
    assert env["RAY_AUTH_MODE"].get("value") == "token", "autoscaler"
    ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == TOKEN_SECRET, "autoscaler"


def test_kuberay_gpu_workers_ask_for_gpus(raycluster):
  (group,) = raycluster["spec"]["workerGroupSpecs"]
  resources = group["template"]["spec"]["containers"][0]["resources"]
  # KubeRay turns the nvidia.com/gpu limit into `ray start --num-gpus` (pod.go,
  # addWellKnownAcceleratorResources); the scheduler reads the request, equal to the limit.
  assert int(resources["limits"]["nvidia.com/gpu"]) == 1
  assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"]
  head = raycluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
  assert "nvidia.com/gpu" not in head["resources"].get("limits", {})


def test_kuberay_ray_version_is_the_projects_ray(raycluster):
  ray_version = version.Version(raycluster["spec"]["rayVersion"])
  ray_req = _project_ray()
  assert ray_req.specifier.contains(ray_version), (ray_version, str(ray_req))
  assert ray_version >= MIN_RAY
