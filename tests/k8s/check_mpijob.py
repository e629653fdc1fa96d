#!/usr/bin/python3
"""Checks k8s/mpijob.yaml as far as it can be checked without a cluster.

    check_mpijob.py MANIFEST DOCKERFILE [--crd CRD]

1. With --crd, the MPIJob against the schema of the MPI Operator's CustomResourceDefinition (its
   spec.versions[v2beta1].schema.openAPIV3Schema, validated as JSON Schema; ../shared/k8s/ holds it
   beside the checkout); where that file is missing nothing is checked and the exit status is 77
   (skipped).
2. The operator's admission rules (pkg/apis/kubeflow/validation/validation.go): slotsPerWorker set
   and >= 0, sshAuthMountPath set, mpiImplementation and runPolicy.cleanPodPolicy valid, a
   Launcher with replicas 1, a Worker with replicas >= 1, a container in each template,
   restartPolicy Never or OnFailure, and a DNS-1035 label <name>-worker-<replicas-1> of <= 63
   characters.
3. gridtrain's own: workers × slotsPerWorker = the launcher's mpirun -np = --grid.dp × tp × pp;
   one rank per GPU (each worker's nvidia.com/gpu limit = slotsPerWorker); checkpoint.resume =
   auto with checkpoint.dir and data on the persistent volume every pod mounts at the same path;
   the image is built by the project's install and build scripts (the Dockerfile).
Then it proves that the checks can fail: each of a list of broken copies of the manifest must be
refused. Exit status 0 when all hold, 1 with the problems listed.
"""
import argparse
import copy
import os
import re
import sys

import jsonschema
import yaml


def job_problems(job):
    """Problems of an MPIJob document under rules 2 and 3."""
    bad = []
    spec = job.get("spec", {})
    if not isinstance(spec.get("slotsPerWorker"), int) or spec["slotsPerWorker"] < 0:
        bad.append("spec.slotsPerWorker must be set, an integer >= 0")
    if not spec.get("sshAuthMountPath"):
        bad.append("spec.sshAuthMountPath must be set")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        bad.append("spec.mpiImplementation must be OpenMPI, Intel or MPICH")
    if spec.get("runPolicy", {}).get("cleanPodPolicy") not in ("None", "Running", "All"):
        bad.append("spec.runPolicy.cleanPodPolicy must be None, Running or All")
    replicas = spec.get("mpiReplicaSpecs", {})
    launcher, worker = replicas.get("Launcher"), replicas.get("Worker")
    if not launcher or launcher.get("replicas") != 1:
        bad.append("mpiReplicaSpecs.Launcher must exist with replicas: 1")
    if not worker or not isinstance(worker.get("replicas"), int) or worker["replicas"] < 1:
        bad.append("mpiReplicaSpecs.Worker must exist with replicas >= 1")
    for role, r in replicas.items():
        if not r.get("template", {}).get("spec", {}).get("containers"):
            bad.append(f"mpiReplicaSpecs.{role}: the template needs a container")
        if r.get("restartPolicy", "Never") not in ("Never", "OnFailure"):
            bad.append(f"mpiReplicaSpecs.{role}.restartPolicy must be Never or OnFailure")
    name = job.get("metadata", {}).get("name", "")
    label = f"{name}-worker-{(worker or {}).get('replicas', 1) - 1}"
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", label) or len(label) > 63:
        bad.append(f"metadata.name {name!r}: {label!r} is not a DNS-1035 label of <= 63 characters")
    return bad or gridtrain_problems(spec, launcher, worker)


def gridtrain_problems(spec, launcher, worker):
    bad = []
    command = launcher["template"]["spec"]["containers"][0].get("command", [])
    flags = dict(re.match(r"--([\w.]+)=(.*)", a).groups() for a in command if re.match(r"--[\w.]+=", a))
    np = int(command[command.index("-np") + 1]) if "-np" in command else None
    slots = spec["slotsPerWorker"] * worker["replicas"]
    grid = 1
    for axis in ("dp", "tp", "pp"):
        grid *= int(flags.get(f"grid.{axis}", "1" if axis != "dp" else "0"))
    if not (np == slots == grid):
        bad.append(f"workers × slotsPerWorker = {slots}, mpirun -np = {np}, grid.dp × tp × pp = {grid}: must be equal")
    for c in worker["template"]["spec"]["containers"]:
        gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        if gpus != spec["slotsPerWorker"]:
            bad.append(f"worker container {c['name']}: nvidia.com/gpu {gpus} != slotsPerWorker (one rank per GPU)")
    if flags.get("checkpoint.resume") != "auto":
        bad.append("the launcher's gridtrain needs --checkpoint.resume=auto (a rescheduled job continues)")

    def mounts(r):
        pod = r["template"]["spec"]
        claims = {v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
        return {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", []) if m["name"] in claims}

    shared = mounts(launcher) & mounts(worker)
    for key in ("checkpoint.dir", "data.path", "output.dir"):
        if not any(flags.get(key, "").startswith(p.rstrip("/") + "/") for p in shared):
            bad.append(f"--{key}={flags.get(key)} is not on the persistent volume every pod mounts ({sorted(shared)})")
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("manifest")
    p.add_argument("dockerfile")
    p.add_argument("--crd", help="the MPIJob CustomResourceDefinition (YAML)")
    args = p.parse_args()
    manifest, dockerfile = args.manifest, args.dockerfile
    if args.crd and not os.path.isfile(args.crd):
        print(f"SKIP: {args.crd} not found: the schema cannot be checked here")
        return 77
    docs = list(yaml.safe_load_all(open(manifest)))
    jobs = [d for d in docs if d.get("kind") == "MPIJob"]
    problems = [] if len(jobs) == 1 else [f"{manifest}: {len(jobs)} MPIJob documents, expected 1"]
    job = jobs[0]
    if job.get("apiVersion") != "kubeflow.org/v2beta1":
        problems.append(f"apiVersion {job.get('apiVersion')}: expected kubeflow.org/v2beta1")
    claims = {d["metadata"]["name"] for d in docs if d.get("kind") == "PersistentVolumeClaim"}
    for role, r in job["spec"]["mpiReplicaSpecs"].items():
        for v in r["template"]["spec"].get("volumes", []):
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in claims:
                problems.append(f"{role}: claim {v['persistentVolumeClaim']['claimName']} is not in the manifest")
    problems += job_problems(job)
    docker = open(dockerfile).read()
    for step in ("scripts/install-deps", "cmake --preset default", "cmake --build --preset default"):
        if step not in docker:
            problems.append(f"{dockerfile} does not build with `{step}`")
    if args.crd:
        version = next(v for v in yaml.safe_load(open(args.crd))["spec"]["versions"] if v["name"] == "v2beta1")
        validator = jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])
        problems += [f"schema: {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(job)]

    # The checks must be able to fail: broken copies of the job, each refused.
    def broken(edit):
        j = copy.deepcopy(job)
        edit(j)
        return j
    rs = lambda j: j["spec"]["mpiReplicaSpecs"]  # noqa: E731
    cases = {
        "no slotsPerWorker": lambda j: j["spec"].pop("slotsPerWorker"),
        "no sshAuthMountPath": lambda j: j["spec"].pop("sshAuthMountPath"),
        "two launchers": lambda j: rs(j)["Launcher"].update(replicas=2),
        "no workers": lambda j: rs(j)["Worker"].update(replicas=0),
        "a name that is no DNS label": lambda j: j["metadata"].update(name="Gridtrain_KJV"),
        "a name too long": lambda j: j["metadata"].update(name="g" * 60),
        "restartPolicy Always": lambda j: rs(j)["Worker"].update(restartPolicy="Always"),
        "np against slots": lambda j: j["spec"].update(slotsPerWorker=4),
        "no resume": lambda j: rs(j)["Launcher"]["template"]["spec"]["containers"][0]["command"].remove(
            "--checkpoint.resume=auto"),
    }
    for what, edit in cases.items():
        if not job_problems(broken(edit)):
            problems.append(f"self-check: a job with {what} was not refused")
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    print(f"OK: {manifest}: admission rules, {len(cases)} broken copies refused, ranks "
          f"{job['spec']['slotsPerWorker']} × {rs(job)['Worker']['replicas']} = -np = dp × tp × pp"
          + (f"; the schema of {args.crd}" if args.crd else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
