#!/usr/bin/env python3
"""Regenerates api/src/kube/protobuf/schema.txt: the protobuf field numbers, JSON names and types of the
Kubernetes kinds keel serves, in keel's own compact format (see api/src/kube/protobuf/schema.rs).

Facts only: message names, field numbers, field types (from the `k8s-pb` crate's prost attributes) and
JSON field names (from the `k8s-openapi` crate's serde keys), both taken from the local cargo registry
after `cargo fetch`. Run it when those crates are upgraded:

    scripts/gen-kube-proto-schema.py > api/src/kube/protobuf/schema.txt
"""
import glob
import os
import re
import sys

REG = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/"))
PB = next(g for r in REG for g in glob.glob(r + "k8s-pb-0.9.*/src"))
OA = next(g for r in REG for g in glob.glob(r + "k8s-openapi-0.28.*/src/v1_32"))

ROOTS = [
    "api.core.v1." + k
    for k in ["Namespace", "Pod", "Binding", "Node", "Service", "Endpoints", "ConfigMap", "Secret", "ServiceAccount",
              "Event", "ReplicationController", "ResourceQuota", "LimitRange", "PersistentVolume", "PersistentVolumeClaim", "PodTemplate"]
] + [
    "api.apps.v1.Deployment", "api.apps.v1.ReplicaSet", "api.apps.v1.StatefulSet", "api.apps.v1.DaemonSet",
    "api.batch.v1.Job", "api.batch.v1.CronJob", "api.events.v1.Event", "api.rbac.v1.Role",
    "api.rbac.v1.RoleBinding", "api.rbac.v1.ClusterRole", "api.rbac.v1.ClusterRoleBinding",
    "api.coordination.v1.Lease", "api.discovery.v1.EndpointSlice", "api.autoscaling.v1.Scale",
    "apimachinery.pkg.apis.meta.v1.DeleteOptions", "api.policy.v1.PodDisruptionBudget", "api.policy.v1.Eviction",
    "api.apps.v1.ControllerRevision", "api.scheduling.v1.PriorityClass",
    "api.authorization.v1.SubjectAccessReview", "api.authorization.v1.SelfSubjectAccessReview",
    "api.authorization.v1.LocalSubjectAccessReview", "api.authorization.v1.SelfSubjectRulesReview",
    "api.authentication.v1.SelfSubjectReview", "api.authentication.v1.TokenRequest",
    "api.authentication.v1.TokenReview", "api.networking.v1.Ingress", "api.networking.v1.IngressClass",
    "api.storage.v1.StorageClass", "api.storage.v1.VolumeAttachment", "api.storage.v1.CSIDriver",
    "api.storage.v1.CSINode", "api.storage.v1.CSIStorageCapacity",
    "api.admissionregistration.v1.MutatingWebhookConfiguration",
    "api.admissionregistration.v1.ValidatingWebhookConfiguration", "api.node.v1.RuntimeClass", "api.autoscaling.v2.HorizontalPodAutoscaler",
    "api.autoscaling.v1.HorizontalPodAutoscaler",
    "api.admissionregistration.v1.ValidatingAdmissionPolicy",
    "api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
]

def parse_fields(body):
    """(attrs, field name, rust type, markers) per field; markers are the `+key=value` doc lines above it."""
    fields, markers, lines, i = [], {}, body.split("\n"), 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("///"):
            m = re.match(r"///\s*\+(patchMergeKey|patchStrategy|listType|listMapKey|mapType)=(\S+)", line)
            if m:
                markers.setdefault(m.group(1), []).append(m.group(2))
        elif line.startswith("#[prost("):
            attrs = line[len("#[prost("):].rstrip(")]").rstrip(")")
            decl = ""
            i += 1
            while i < len(lines):
                decl += " " + lines[i].strip()
                if re.search(r",\s*$", lines[i]) and decl.count("<") == decl.count(">"):
                    break
                i += 1
            m = re.match(r"\s*pub\s+(r#)?(\w+)\s*:\s*(.*),\s*$", decl)
            if m:
                fields.append((attrs, m.group(2), " ".join(m.group(3).split()), markers))
            markers = {}
        elif line and not line.startswith("#["):
            markers = {}
        i += 1
    return fields


def parse_pb():
    msgs = {}
    for path in glob.glob(PB + "/**/mod.rs", recursive=True):
        mod = os.path.relpath(os.path.dirname(path), PB).replace(os.sep, ".")
        text = open(path).read()
        for m in re.finditer(r"pub struct (\w+) \{(.*?)\n\}", text, re.S):
            msgs[mod + "." + m.group(1)] = (mod, parse_fields(m.group(2)))
    return msgs


def resolve(mod, rtype):
    """The full message name a Rust type path refers to, from module `mod`."""
    inner = rtype.replace(" ", "")
    for wrap in ["::core::option::Option<", "::prost::alloc::vec::Vec<"]:
        if inner.startswith(wrap):
            inner = inner[len(wrap):-1].rstrip(",")
    if "BTreeMap<" in inner:
        inner = inner.split(",", 1)[1].strip().rstrip(">").strip().rstrip(",").strip()
    parts = [p for p in inner.split("::") if p]
    base = mod.split(".")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return ".".join(base + parts)


def openapi_keys():
    keys = {}
    for path in glob.glob(OA + "/**/*.rs", recursive=True):
        mod = os.path.relpath(os.path.dirname(path), OA).replace(os.sep, ".")
        text = open(path).read()
        sm = re.search(r"pub struct (\w+)", text)
        if not sm:
            continue
        ks = re.findall(r'"([A-Za-z0-9$_-]+)" => Field::Key_', text)
        keys[mod + "." + sm.group(1)] = ks
    return keys


def camel(snake):
    parts = snake.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def flat_names(msgs, target, parent, depth=0):
    """The JSON-visible field names of message `target`, a field itself inlined (its name unknown to
    `parent`, its own names all known) counted by its fields: RuleWithOperations inlines Rule, and
    NamedRuleWithOperations inlines RuleWithOperations."""
    if target not in msgs or depth > 3:
        return set()
    out = set()
    for attrs, fname, rtype, _ in msgs[target][1]:
        norm = fname.replace("_", "").lower()
        if norm not in parent and attrs.split(",")[0].strip() == "message":
            sub = flat_names(msgs, resolve(msgs[target][0], rtype), parent, depth + 1)
            if sub and sub <= parent:
                out |= sub
                continue
        out.add(norm)
    return out


def main():
    msgs = parse_pb()
    keys = openapi_keys()
    out, seen, todo = [], set(), list(ROOTS)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in msgs:
            sys.exit(f"missing message {name}")
        mod, fields = msgs[name]
        out.append(f"M {name}")
        json_keys = keys.get(name, [])
        for attrs, fname, rtype, markers in fields:
            tag = re.search(r'tag\s*=\s*"(\d+)"', attrs).group(1)
            norm = fname.replace("_", "").lower()
            jname = next((k for k in json_keys if k.replace("_", "").replace("-", "").lower() == norm), camel(fname))
            kind = attrs.split(",")[0].strip()
            rep = " r" if "repeated" in attrs else ""
            extra = ""
            for key, short in [("patchMergeKey", "pmk"), ("patchStrategy", "ps"), ("listType", "lt"),
                               ("listMapKey", "lmk"), ("mapType", "mt")]:
                if key in markers:
                    extra += f" {short}={','.join(markers[key])}"
            if kind.startswith("btree_map"):
                val = attrs.split('"')[1].split(",")[1].strip()
                if val == "message":
                    target = resolve(mod, rtype)
                    todo.append(target)
                    out.append(f"F {tag} {jname} map:{target}{extra}")
                else:
                    out.append(f"F {tag} {jname} map:{val}{extra}")
            elif kind == "message":
                target = resolve(mod, rtype)
                todo.append(target)
                # Go's `json:",inline"` (Volume.volumeSource, ...): no JSON key of its own, its
                # message's fields sit in this object.
                # (A key missing because the field is newer than k8s-openapi's types is not that:
                # then the message's own fields are missing too.)
                parent = {k.replace("_", "").replace("-", "").lower() for k in json_keys}
                inner = flat_names(msgs, target, parent)
                if json_keys and jname not in json_keys and inner and inner <= parent:
                    extra += " in"
                out.append(f"F {tag} {jname} {target}{rep}{extra}")
            else:
                kind = kind.split("=")[0].strip()
                out.append(f"F {tag} {jname} {kind}{rep}{extra}")
    print("# Generated by scripts/gen-kube-proto-schema.py: message fields as `F <number> <json name> <type> [r]`,")
    print("# then merge metadata: pmk= patch merge key, ps= patch strategy, lt= list type, lmk= list map keys, mt= map type,\n# in = inlined (the message's fields are the object's own, as Go's `json:\",inline\"`).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
