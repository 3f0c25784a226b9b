"""The slow-step part of scripts/k8s-check.sh.

    slow_step.py pod DEPLOY.yaml SEED SECONDS   -> a Pod manifest on stdout: the cpu-demo
        Deployment's pod template (same probes, config and security) with the sim backend and
        the injected fault slow_step:SEED@SECONDS (every engine step holding that seed takes
        SECONDS longer), under labels no Service, PDB or Deployment selects;
    slow_step.py call ADDR SEED               -> one Synthesize with that seed: the engine
        stalls; prints the call's status and how long it took.
"""

import json
import sys
import time

import yaml

if sys.argv[1] == "pod":
    docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    tpl = dep["spec"]["template"]
    c = tpl["spec"]["containers"][0]
    c["env"] = c.get("env", []) + [
        {"name": "ORPHEUS_ENGINE__BACKEND", "value": "sim"},
        {"name": "ORPHEUS_ENGINE__SIM_FAULTS", "value": f"slow_step:{sys.argv[3]}@{sys.argv[4]}"}]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "orpheus-slow-step", "labels": {"app": "orpheus-slow-step"},
                        "annotations": tpl["metadata"].get("annotations", {})},
           "spec": tpl["spec"]}
    json.dump(pod, sys.stdout)
else:
    from orpheus_tts_client import Client, Sampling, TTSError
    t0 = time.time()
    with Client(sys.argv[2], timeout=120) as tts:
        try:
            tts.synthesize("A step that takes far too long.", sampling=Sampling(seed=int(sys.argv[3])))
            status = "OK"
        except TTSError as e:
            status = f"{e.code.name}: {e.details[:90]}"
    print(f"{status} after {time.time() - t0:.1f} s")
