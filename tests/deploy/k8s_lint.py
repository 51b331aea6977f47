"""Schema-less lint of the Kubernetes recipe in deploy/k8s/ (nothing here talks to a cluster):
every file parses as YAML, every document has the keys its kind needs, and the documents agree
with each other - the Service selects the Deployment's pods and targets a port they open, the
readiness probe reads /health, the grace period covers the preStop wait plus lancet's drain,
the pods ask for a GPU, the HPA scales the Deployment on a metric the prometheus-adapter rule
actually serves. Then it breaks a copy of the recipe in several ways and checks that each
break is caught (a lint that cannot fail checks nothing). Run by tests/deploy/k8s_lint_test.cc.

  python k8s_lint.py DEPLOY_K8S_DIR
"""
import copy
import glob
import os
import re
import sys

import yaml


def dig(doc, path):
    """doc["a"]["b"][0]... for path "a.b.0"; None when any step is missing."""
    cur = doc
    for key in path.split("."):
        if isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        elif isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            return None
    return cur


def flag_value(args, name):
    for a in args or []:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def lint_deployment(doc, errors):
    name = dig(doc, "metadata.name")
    match = dig(doc, "spec.selector.matchLabels") or {}
    labels = dig(doc, "spec.template.metadata.labels") or {}
    if not match or any(labels.get(k) != v for k, v in match.items()):
        errors.append(f"Deployment {name}: spec.selector.matchLabels must be a non-empty subset of the pod labels")
    containers = dig(doc, "spec.template.spec.containers") or []
    if not containers:
        errors.append(f"Deployment {name}: no containers")
    grace = dig(doc, "spec.template.spec.terminationGracePeriodSeconds")
    for c in containers:
        where = f"Deployment {name} container {c.get('name')}"
        for key in ("name", "image", "ports"):
            if not c.get(key):
                errors.append(f"{where}: missing {key}")
        port_names = {p.get("name") for p in c.get("ports") or []} | {p.get("containerPort") for p in c.get("ports") or []}
        probe = dig(c, "readinessProbe.httpGet")
        if not probe or probe.get("path") != "/health" or probe.get("port") not in port_names:
            errors.append(f"{where}: readinessProbe must GET /health on a container port")
        gpus = dig(c, "resources.limits") or {}
        if not isinstance(gpus.get("nvidia.com/gpu"), int) or gpus["nvidia.com/gpu"] < 1:
            errors.append(f"{where}: resources.limits must ask for nvidia.com/gpu")
        pre_stop = " ".join(dig(c, "lifecycle.preStop.exec.command") or [])
        wait = re.search(r"\bsleep (\d+)", pre_stop)
        if not wait:
            errors.append(f"{where}: lifecycle.preStop must wait (sleep N) for the endpoint removal to spread")
        drain = flag_value(c.get("args"), "--drain-timeout")
        if drain is None:
            errors.append(f"{where}: args must set --drain-timeout")
        if not isinstance(grace, int):
            errors.append(f"Deployment {name}: terminationGracePeriodSeconds missing")
        elif wait and drain is not None and grace <= int(wait.group(1)) + float(drain):
            errors.append(f"{where}: terminationGracePeriodSeconds {grace} must exceed preStop {wait.group(1)} s "
                          f"+ --drain-timeout {drain} s")


def lint_service(doc, deployments, errors):
    name = dig(doc, "metadata.name")
    selector = dig(doc, "spec.selector") or {}
    ports = dig(doc, "spec.ports") or []
    targets = [d for d in deployments
               if selector and all((dig(d, "spec.template.metadata.labels") or {}).get(k) == v
                                   for k, v in selector.items())]
    if not targets:
        errors.append(f"Service {name}: its selector matches no Deployment's pods")
    for d in targets:
        open_ports = set()
        for c in dig(d, "spec.template.spec.containers") or []:
            for p in c.get("ports") or []:
                open_ports |= {p.get("name"), p.get("containerPort")}
        for p in ports:
            if p.get("targetPort", p.get("port")) not in open_ports:
                errors.append(f"Service {name}: targetPort {p.get('targetPort')} is no port of the pods")
    if not ports:
        errors.append(f"Service {name}: no ports")


def adapter_metric_names(docs):
    """The custom-metric names prometheus-adapter would serve for vllm:num_requests_waiting."""
    names = set()
    for d in docs:
        if d.get("kind") != "ConfigMap":
            continue
        for text in (d.get("data") or {}).values():
            for rule in (yaml.safe_load(text) or {}).get("rules") or []:
                series = re.match(r"\s*([A-Za-z_:][A-Za-z0-9_:]*)", rule.get("seriesQuery", ""))
                rename = rule.get("name") or {}
                if not series or not rule.get("metricsQuery") or "matches" not in rename:
                    continue
                m = re.search(rename["matches"], series.group(1))
                if m:
                    names.add(re.sub(r"\$\{(\d+)\}", lambda g: m.group(int(g.group(1))), rename.get("as", "")))
    return names


def lint_hpa(doc, deployments, served, errors):
    name = dig(doc, "metadata.name")
    if doc.get("apiVersion") != "autoscaling/v2":
        errors.append(f"HPA {name}: apiVersion must be autoscaling/v2 (custom metrics)")
    ref = dig(doc, "spec.scaleTargetRef") or {}
    if ref.get("kind") != "Deployment" or ref.get("name") not in {dig(d, "metadata.name") for d in deployments}:
        errors.append(f"HPA {name}: scaleTargetRef names no Deployment of the recipe")
    lo, hi = dig(doc, "spec.minReplicas"), dig(doc, "spec.maxReplicas")
    if not isinstance(lo, int) or not isinstance(hi, int) or not 1 <= lo <= hi:
        errors.append(f"HPA {name}: needs 1 <= minReplicas <= maxReplicas")
    metrics = [m for m in dig(doc, "spec.metrics") or [] if m.get("type") == "Pods"]
    names = {dig(m, "pods.metric.name") for m in metrics}
    if "vllm_num_requests_waiting" not in names:
        errors.append(f"HPA {name}: must scale on the pods metric vllm_num_requests_waiting")
    for n in names - served:
        errors.append(f"HPA {name}: metric {n} is not served by the prometheus-adapter rule")
    for m in metrics:
        if not dig(m, "pods.target.averageValue"):
            errors.append(f"HPA {name}: metric {dig(m, 'pods.metric.name')} needs target.averageValue")


def lint(docs):
    errors = []
    for d in docs:
        for key in ("apiVersion", "kind", "metadata.name"):
            if dig(d, key) in (None, ""):
                errors.append(f"{d.get('kind', 'document')}: missing {key}")
    deployments = [d for d in docs if d.get("kind") == "Deployment"]
    if not deployments:
        errors.append("no Deployment")
    for d in deployments:
        lint_deployment(d, errors)
    services = [d for d in docs if d.get("kind") == "Service"]
    if not services:
        errors.append("no Service")
    for d in services:
        lint_service(d, deployments, errors)
    hpas = [d for d in docs if d.get("kind") == "HorizontalPodAutoscaler"]
    if not hpas:
        errors.append("no HorizontalPodAutoscaler")
    served = adapter_metric_names(docs)
    for d in hpas:
        lint_hpa(d, deployments, served, errors)
    for d in docs:
        if d.get("kind") == "PodDisruptionBudget":
            match = dig(d, "spec.selector.matchLabels") or {}
            if not any(all((dig(x, "spec.template.metadata.labels") or {}).get(k) == v for k, v in match.items())
                       for x in deployments) or not match:
                errors.append(f"PodDisruptionBudget {dig(d, 'metadata.name')}: selects no Deployment's pods")
    return errors


def breakages(docs):
    """(what, broken copy) pairs the lint must reject."""
    def edit(kind, fn):
        out = copy.deepcopy(docs)
        for d in out:
            if d.get("kind") == kind:
                fn(d)
        return out
    container = lambda d: d["spec"]["template"]["spec"]["containers"][0]
    return [
        ("readiness probe on another path",
         edit("Deployment", lambda d: container(d)["readinessProbe"]["httpGet"].update(path="/"))),
        ("no GPU limit", edit("Deployment", lambda d: container(d)["resources"]["limits"].pop("nvidia.com/gpu"))),
        ("grace period shorter than the drain",
         edit("Deployment", lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30))),
        ("no preStop", edit("Deployment", lambda d: container(d).pop("lifecycle"))),
        ("Service selecting other pods", edit("Service", lambda d: d["spec"]["selector"].update(app="other"))),
        ("Service targeting a closed port", edit("Service", lambda d: d["spec"]["ports"][0].update(targetPort=9))),
        ("HPA on a metric the adapter does not serve",
         edit("HorizontalPodAutoscaler", lambda d: d["spec"]["metrics"][0]["pods"]["metric"].update(name="x"))),
        ("HPA scaling another Deployment",
         edit("HorizontalPodAutoscaler", lambda d: d["spec"]["scaleTargetRef"].update(name="other"))),
        ("a document without a name", edit("Service", lambda d: d["metadata"].pop("name"))),
    ]


def main():
    root = sys.argv[1]
    files = sorted(glob.glob(os.path.join(root, "*.yaml")))
    if not files:
        print(f"FAIL: no YAML files in {root}")
        return 1
    docs = []
    for path in files:
        try:
            with open(path) as f:
                found = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            print(f"FAIL: {path} is not valid YAML: {e}")
            return 1
        if not found or not all(isinstance(d, dict) for d in found):
            print(f"FAIL: {path} holds no Kubernetes objects")
            return 1
        print(f"ok: {os.path.basename(path)} parses ({', '.join(d.get('kind', '?') for d in found)})")
        docs += found
    errors = lint(docs)
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print(f"ok: {len(docs)} objects have the keys their kinds need and agree with each other")
    for what, broken in breakages(docs):
        if not lint(broken):
            print(f"FAIL: the lint accepts a recipe with {what}")
            return 1
        print(f"ok: the lint rejects {what}")
    print("PASS k8s_lint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
