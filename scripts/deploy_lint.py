"""The deployment files against the schemas and against the binaries (run by scripts/deploy-lint).

1. deploy/k8s: every Kubernetes resource validated by kubernetes-validate (PyPI; the
   Kubernetes OpenAPI schemas it bundles) with --strict (unknown fields are errors); the KEDA
   ScaledObject against a schema derived from KEDA's CRD types (PyPI cloudcoil-models-keda,
   pydantic models generated from the CRDs; every object closed to unknown fields, as
   `kubectl apply --validate=strict` would); kustomization.yaml's resources and image named.
2. The compose file against the Compose Specification (check-jsonschema's vendored schema).
3. Every container of the project's image (k8s Deployments, compose services): the binary it
   runs exists, its flags appear in that binary's `--help`, every environment variable it is
   given is one the binary reads (an `[env: NAME=]` of its `--help`, or an OpenTelemetry
   variable its telemetry reads), and every key of the shared ConfigMap is read by one of the
   binaries that load it. A variable only used inside another's value, `$(POD_NAME)`, is fine.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
BINARIES = ("gateway", "worker", "taskctl")
PROJECT_IMAGE = "ghcr.io/example/taskcluster"
COMPOSE_IMAGE = "taskcluster:local"

errors: list[str] = []


def error(message: str) -> None:
    errors.append(message)
    print(f"deploy-lint: ERROR: {message}")


def load_all(path: pathlib.Path) -> list[dict]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


# --- what the binaries know ---------------------------------------------------------------
def known_by(bin_dir: pathlib.Path) -> dict[str, tuple[set[str], set[str]]]:
    """(long flags, environment variables) of each binary, from its --help, plus the
    OpenTelemetry variables the shared telemetry crate reads (named as string literals in
    shared/telemetry/src: the binaries' --help does not list the OTel SDK's variables)."""
    otel = set()
    for source in (ROOT / "shared" / "telemetry" / "src").rglob("*.rs"):
        otel.update(re.findall(r'"(OTEL_[A-Z_]*[A-Z])"', source.read_text()))
    known = {}
    for name in BINARIES:
        text = subprocess.run(
            [str(bin_dir / name), "--help"], capture_output=True, text=True, check=True
        ).stdout
        flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))
        envs = set(re.findall(r"\[env: ([A-Z0-9_]+)[=\]]", text))
        known[name] = (flags, envs | (otel if name != "taskctl" else set()))
    return known


def substituted(env: list[dict]) -> set[str]:
    """Variables referenced as $(NAME) in the values of others (Kubernetes expands them)."""
    used = set()
    for item in env:
        used.update(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(item.get("value", ""))))
    return used


def check_command(where: str, argv: list[str], env_names: list[str], also_used: set[str],
                  known) -> str | None:
    if not argv or argv[0] not in known:
        error(f"{where}: runs {argv[:1]}, not one of {', '.join(BINARIES)}")
        return None
    binary = argv[0]
    flags, envs = known[binary]
    for arg in argv[1:]:
        if arg.startswith("--") and arg.split("=", 1)[0] not in flags:
            error(f"{where}: {binary} has no flag {arg.split('=', 1)[0]} (not in its --help)")
    for name in env_names:
        if name not in envs and name not in also_used:
            error(f"{where}: {binary} does not read {name} (not in its --help, nor an OTel variable)")
    return binary


# --- 1. Kubernetes -----------------------------------------------------------------------
def check_k8s(known) -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization.get("resources", [])
    present = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    for name in listed:
        if not (K8S / name).is_file():
            error(f"kustomization.yaml lists {name}, which does not exist")
    for name in present:
        if name not in listed:
            error(f"deploy/k8s/{name} is not in kustomization.yaml's resources")
    if not any(i.get("name") == PROJECT_IMAGE for i in kustomization.get("images", [])):
        error(f"kustomization.yaml sets no image for {PROJECT_IMAGE}")

    core = [K8S / n for n in present if n != "keda-scaledobject.yaml"]
    run = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--no-warn", "--quiet",
         *map(str, core)],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        error(f"kubernetes-validate --strict failed:\n{run.stdout}{run.stderr}")
    else:
        print(f"deploy-lint: kubernetes-validate --strict: {len(core)} files pass")

    check_keda()

    # The shared ConfigMap (configMapGenerator literals, loaded with envFrom).
    config = {}
    for gen in kustomization.get("configMapGenerator", []):
        config[gen["name"]] = [lit.split("=", 1)[0] for lit in gen.get("literals", [])]
    readers: dict[str, set[str]] = {}
    deployments = {}
    for path in core:
        for doc in load_all(path):
            if doc.get("kind") not in ("Deployment", "StatefulSet"):
                continue
            deployments[doc["metadata"]["name"]] = doc
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if not c.get("image", "").startswith(PROJECT_IMAGE):
                    continue
                where = f"deploy/k8s/{path.name}: container {c['name']}"
                if c.get("command"):
                    error(f"{where}: sets command (the image's entrypoint must run)")
                env = c.get("env", [])
                binary = check_command(where, c.get("args", []), [e["name"] for e in env],
                                       substituted(env), known)
                for source in c.get("envFrom", []):
                    ref = source.get("configMapRef", {}).get("name")
                    if ref not in config:
                        error(f"{where}: envFrom names ConfigMap {ref}, which kustomization.yaml does not generate")
                    elif binary:
                        readers.setdefault(ref, set()).add(binary)
    for ref, binaries in readers.items():
        for key in config[ref]:
            if not any(key in known[b][1] for b in binaries):
                error(f"ConfigMap {ref}: {key} is read by none of {', '.join(sorted(binaries))}")
    # KEDA scales a Deployment that exists.
    for doc in load_all(K8S / "keda-scaledobject.yaml"):
        target = doc["spec"]["scaleTargetRef"]["name"]
        if target not in deployments:
            error(f"ScaledObject {doc['metadata']['name']} scales {target}, no Deployment of that name")


def closed(schema):
    """Every object schema that lists its properties refuses others (strict validation)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            closed(value)
    elif isinstance(schema, list):
        for value in schema:
            closed(value)
    return schema


def check_keda() -> None:
    from cloudcoil.models.keda.v1alpha1 import ScaledObject

    schema = closed(ScaledObject.model_json_schema(by_alias=True, mode="validation"))
    validator = jsonschema.Draft202012Validator(schema)
    for doc in load_all(K8S / "keda-scaledobject.yaml"):
        where = f"deploy/k8s/keda-scaledobject.yaml: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        if doc.get("apiVersion") != "keda.sh/v1alpha1" or doc.get("kind") != "ScaledObject":
            error(f"{where}: expected apiVersion keda.sh/v1alpha1, kind ScaledObject")
        problems = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for problem in problems:
            path = "/".join(str(p) for p in problem.absolute_path)
            error(f"{where}: {path}: {problem.message[:300]}")
        if not problems:
            print(f"deploy-lint: {where} passes the KEDA schema (strict)")


# --- 2 and 3. Compose ----------------------------------------------------------------------
def check_compose(known) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(COMPOSE)],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        error(f"check-jsonschema (Compose Specification) failed:\n{run.stdout}{run.stderr}")
    else:
        print("deploy-lint: deploy/docker-compose.yml passes the Compose Specification schema")
    compose = yaml.safe_load(COMPOSE.read_text())  # resolves the x-* anchors and merge keys
    for name, service in compose["services"].items():
        if service.get("image") != COMPOSE_IMAGE:
            continue
        env = service.get("environment", {})
        names = list(env) if isinstance(env, dict) else [e.split("=", 1)[0] for e in env]
        check_command(f"deploy/docker-compose.yml: service {name}", service.get("command", ["gateway"]),
                      names, set(), known)


def main() -> int:
    bin_dir = pathlib.Path(sys.argv[1])
    known = known_by(bin_dir)
    check_k8s(known)
    check_compose(known)
    if errors:
        print(f"deploy-lint: {len(errors)} problem(s)")
        return 1
    print("deploy-lint: the manifests and the compose file match the schemas and the binaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
