#!/usr/bin/env python3
"""Writes api/kube/src/authz/bootstrap_policy.json: Kubernetes' bootstrap RBAC policy in keel's compact form.

Source of the facts: kubernetes/kubernetes, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata/
(cluster-roles.yaml, controller-roles.yaml, cluster-role-bindings.yaml, namespace-roles.yaml,
namespace-role-bindings.yaml and, when present, controller-role-bindings.yaml), i.e. the objects
kube-apiserver reconciles at start, as of Kubernetes 1.32 with its default feature gates.

    scripts/gen-rbac-bootstrap.py TESTDATA_DIR > api/kube/src/authz/bootstrap_policy.json

The output is the release-1.32 policy also when the input is a newer testdata directory: controller
roles of features off by default in 1.32 (or newer than it) are dropped (GATED_OFF), and the
leader-locking Roles get back the ConfigMap rules 1.35 removed (LEADER_LOCKING_1_32). The data in
the repository was made from a newer copy that way; the release-1.32 branch also carries the
backported `watch` verbs on the controller roles (upstream PRs 129528 and 130461).

Compact form, one entry per line:
- a rule is {"g": apiGroups, "r": resources, "n": resourceNames, "u": nonResourceURLs, "v": verbs},
  empty lists left out;
- a subject is "User:NAME", "Group:NAME" or "ServiceAccount:NAMESPACE/NAME";
- every object carries the label kubernetes.io/bootstrapping=rbac-defaults and the annotation
  rbac.authorization.kubernetes.io/autoupdate=true, so neither is written; "labels" holds the others;
- "aggregate" lists the label keys an aggregated ClusterRole selects (each with value "true");
- controller roles are named without their "system:controller:" prefix; each is bound to the
  kube-system ServiceAccount of the same name by a ClusterRoleBinding of the role's name.
"""

import json
import os
import sys

import yaml

CONTROLLER_PREFIX = "system:controller:"
BOOTSTRAP_LABEL = "kubernetes.io/bootstrapping"
RBAC_GROUP = "rbac.authorization.k8s.io"

# Controller roles kube-apiserver 1.32 does not create with its default feature gates.
GATED_OFF = {
    "device-taint-eviction-controller": "DRADeviceTaints, added in 1.33",
    "resource-claim-controller": "DynamicResourceAllocation, beta and off by default in 1.32",
    "selinux-warning-controller": "SELinuxChangePolicy, alpha in 1.32",
    "service-cidrs-controller": "MultiCIDRServiceAllocator, beta and off by default in 1.32",
    "volumeattributesclass-protection-controller": "VolumeAttributesClass, beta and off by default in 1.32",
    "storage-version-migrator-controller": "StorageVersionMigrator, alpha in 1.32",
    "kube-apiserver-serving-clustertrustbundle-publisher": "ClusterTrustBundle publisher, added after 1.32",
}

# 1.32's leader-locking Roles still let the components lock on a ConfigMap of their name, ahead of the
# Lease rules (upstream PR 134297 dropped these in 1.35).
LEADER_LOCKING_1_32 = {
    "system::leader-locking-kube-controller-manager": "kube-controller-manager",
    "system::leader-locking-kube-scheduler": "kube-scheduler",
}


def leader_locking_1_32(name, rules):
    lock = LEADER_LOCKING_1_32.get(name)
    if lock is None or any(r.get("r") == ["configmaps"] for r in rules):
        return rules
    return [{"g": [""], "r": ["configmaps"], "v": ["watch"]},
            {"g": [""], "r": ["configmaps"], "n": [lock], "v": ["get", "update"]}] + rules


def items(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return yaml.safe_load(f)["items"]


def rule(r):
    out = {}
    for key, field in (("g", "apiGroups"), ("r", "resources"), ("n", "resourceNames"),
                       ("u", "nonResourceURLs"), ("v", "verbs")):
        if r.get(field):
            out[key] = list(r[field])
    return out


def rules(obj):
    return [rule(r) for r in (obj.get("rules") or [])]


def subject(s):
    if s["kind"] == "ServiceAccount":
        return "ServiceAccount:%s/%s" % (s["namespace"], s["name"])
    if s["kind"] not in ("User", "Group") or s.get("apiGroup") != RBAC_GROUP:
        raise SystemExit("unexpected subject %r" % (s,))
    return "%s:%s" % (s["kind"], s["name"])


def extra_labels(meta):
    labels = dict(meta.get("labels") or {})
    labels.pop(BOOTSTRAP_LABEL, None)
    return labels


def cluster_role(obj):
    meta = obj["metadata"]
    out = {"name": meta["name"]}
    labels = extra_labels(meta)
    if labels:
        out["labels"] = labels
    agg = obj.get("aggregationRule")
    if agg:
        keys = []
        for sel in agg["clusterRoleSelectors"]:
            (key, value), = sel["matchLabels"].items()
            if value != "true" or sel.get("matchExpressions"):
                raise SystemExit("unexpected selector %r" % (sel,))
            keys.append(key)
        out["aggregate"] = keys
    out["rules"] = rules(obj)
    return out


def binding(obj, namespaced):
    meta = obj["metadata"]
    out = {}
    if namespaced:
        out["namespace"] = meta["namespace"]
    out["name"] = meta["name"]
    out["role"] = obj["roleRef"]["name"]
    out["subjects"] = [subject(s) for s in (obj.get("subjects") or [])]
    return out


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    controllers = []
    for obj in items(d, "controller-roles.yaml"):
        name = obj["metadata"]["name"]
        short = name[len(CONTROLLER_PREFIX):]
        if not name.startswith(CONTROLLER_PREFIX):
            raise SystemExit("controller role %r lacks the prefix" % name)
        if short in GATED_OFF:
            print("dropped %s (%s)" % (name, GATED_OFF[short]), file=sys.stderr)
            continue
        controllers.append({"name": short, "rules": rules(obj)})

    # Upstream binds every controller role to its ServiceAccount; check that where the file is at hand.
    given = items(d, "controller-role-bindings.yaml")
    if given is not None:
        kept = {CONTROLLER_PREFIX + c["name"] for c in controllers}
        for b in given:
            name = b["metadata"]["name"]
            if name not in kept:
                continue
            want = ["ServiceAccount:kube-system/" + name[len(CONTROLLER_PREFIX):]]
            if b["roleRef"]["name"] != name or [subject(s) for s in b["subjects"]] != want:
                raise SystemExit("controller binding %r is not the usual one" % name)

    doc = {
        "source": "kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy, "
                  "Kubernetes 1.32, default feature gates",
        "clusterRoles": [cluster_role(o) for o in items(d, "cluster-roles.yaml")],
        "controllerRoles": controllers,
        "clusterRoleBindings": [binding(o, False) for o in items(d, "cluster-role-bindings.yaml")],
        "roles": [dict(namespace=o["metadata"]["namespace"], name=o["metadata"]["name"],
                       rules=leader_locking_1_32(o["metadata"]["name"], rules(o)))
                  for o in items(d, "namespace-roles.yaml")],
        "roleBindings": [binding(o, True) for o in items(d, "namespace-role-bindings.yaml")],
    }
    out = ["{", '"source": %s,' % json.dumps(doc["source"])]
    keys = ["clusterRoles", "controllerRoles", "clusterRoleBindings", "roles", "roleBindings"]
    for i, key in enumerate(keys):
        out.append('"%s": [' % key)
        entries = [json.dumps(e, separators=(",", ":")) for e in doc[key]]
        out.append(",\n".join(entries))
        out.append("]" + ("," if i + 1 < len(keys) else ""))
    out.append("}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
