#!/usr/bin/env python3
"""Regenerates api/kube/src/encode/layout.txt: how upstream's Go types write themselves as JSON, for the
kinds keel serves: each struct's fields in declaration order (Go's encoding/json writes them in that
order), their JSON names, whether `omitempty`/`omitzero` lets a zero value be left out, and what kind of
value each holds, so that keel can write the same keys in the same order with the same zero values.

Facts only (struct names, field order, JSON names and tags), read from git mirrors of kubernetes/api,
kubernetes/apimachinery, kubernetes/apiextensions-apiserver and kubernetes/kube-aggregator at the tag of the Kubernetes version keel
serves:

    scripts/gen-go-json-layout.py MIRRORS_DIR v0.32.9 > api/kube/src/encode/layout.txt

where MIRRORS_DIR holds `kubernetes+api/repo`, `kubernetes+apimachinery/repo` and
`kubernetes+apiextensions-apiserver/repo` and `kubernetes+kube-aggregator/repo` (bare or not; read with `git show`).

Line format (see api/kube/src/encode/layout.rs):
    S <struct>                      a struct; its fields follow
    F <json name> <type> [omit]     a field; `omit` when a zero value is left out
    I <type>                        an embedded struct whose fields are inlined (`json:",inline"`)
    K <apiVersion> <Kind> <struct>  a served kind and its struct (lists are <Kind>List; `*`: any apiVersion)
Types: string num bool time microtime quantity intstr raw, S:<struct>, *<type> (pointer), []<type>, map:<type>.
"""
import re
import subprocess
import sys

MIRRORS, TAG = sys.argv[1], sys.argv[2]
REPOS = {
    "k8s.io/api": "kubernetes+api",
    "k8s.io/apimachinery": "kubernetes+apimachinery",
    "k8s.io/apiextensions-apiserver": "kubernetes+apiextensions-apiserver",
    "k8s.io/kube-aggregator": "kubernetes+kube-aggregator",
}

# Go package path -> short name used in the table.
def short(pkg):
    for prefix in ("k8s.io/api/", "k8s.io/apimachinery/pkg/apis/", "k8s.io/apiextensions-apiserver/pkg/apis/",
                   "k8s.io/kube-aggregator/pkg/apis/"):
        if pkg.startswith(prefix):
            return pkg[len(prefix):]
    return pkg

# Types whose JSON form comes from a custom marshaller, by package path and name.
SPECIAL = {
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): "time",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "MicroTime"): "microtime",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Duration"): "string",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "FieldsV1"): "raw",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "intstr",
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"): "raw",
    ("k8s.io/apimachinery/pkg/runtime", "Object"): "raw",
    ("k8s.io/apimachinery/pkg/types", "UID"): "string",
    ("k8s.io/apimachinery/pkg/types", "NodeName"): "string",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSON"): "raw",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaPropsOrArray"): "raw",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaPropsOrBool"): "raw",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaPropsOrStringArray"): "raw",
}
BASIC = {"string": "string", "bool": "bool"}
for n in ["int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "byte"]:
    BASIC[n] = "num"

# The kinds keel serves: (apiVersion, Kind, package path).
KINDS = [
    ("v1", k, "k8s.io/api/core/v1")
    for k in ["Namespace", "Pod", "Node", "Service", "Endpoints", "ConfigMap", "Secret", "ServiceAccount",
              "Event", "ReplicationController", "Binding", "ResourceQuota", "LimitRange"]
] + [
    ("apps/v1", k, "k8s.io/api/apps/v1") for k in ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision"]
] + [
    ("batch/v1", "Job", "k8s.io/api/batch/v1"), ("batch/v1", "CronJob", "k8s.io/api/batch/v1"),
    ("autoscaling/v1", "Scale", "k8s.io/api/autoscaling/v1"),
    ("coordination.k8s.io/v1", "Lease", "k8s.io/api/coordination/v1"),
    ("discovery.k8s.io/v1", "EndpointSlice", "k8s.io/api/discovery/v1"),
    ("networking.k8s.io/v1", "NetworkPolicy", "k8s.io/api/networking/v1"),
    ("events.k8s.io/v1", "Event", "k8s.io/api/events/v1"),
    ("policy/v1", "PodDisruptionBudget", "k8s.io/api/policy/v1"),
    ("policy/v1", "Eviction", "k8s.io/api/policy/v1"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"),
    ("apiregistration.k8s.io/v1", "APIService", "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"),
] + [
    ("rbac.authorization.k8s.io/v1", k, "k8s.io/api/rbac/v1") for k in ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]
] + [
    ("scheduling.k8s.io/v1", "PriorityClass", "k8s.io/api/scheduling/v1"),
] + [
    # meta/v1 kinds are written with more than one apiVersion (v1, meta.k8s.io/v1) or none: any matches.
    ("*", k, "k8s.io/apimachinery/pkg/apis/meta/v1")
    for k in ["Status", "WatchEvent", "Table", "PartialObjectMetadata", "PartialObjectMetadataList",
              "APIResourceList", "APIGroupList", "APIGroup", "APIVersions"]
]
# Kinds whose lists are not served.
NO_LIST = {"Binding", "Scale", "Eviction", "Status", "WatchEvent", "Table", "PartialObjectMetadata",
           "PartialObjectMetadataList", "APIResourceList", "APIGroupList", "APIGroup", "APIVersions"}


def repo_and_dir(pkg):
    for prefix, repo in REPOS.items():
        if pkg.startswith(prefix + "/"):
            return repo, pkg[len(prefix) + 1:]
    raise SystemExit(f"no mirror for {pkg}")


def git(repo, *args):
    return subprocess.run(["git", "-C", f"{MIRRORS}/{repo}/repo", *args], check=True, capture_output=True, text=True).stdout


class Package:
    def __init__(self, path):
        self.path = path
        repo, d = repo_and_dir(path)
        files = [f for f in git(repo, "ls-tree", "--name-only", f"{TAG}:{d}").split()
                 if f.endswith(".go") and not f.endswith("_test.go") and not f.startswith("zz_generated")
                 and not f.startswith("generated")]
        self.structs, self.named, self.imports = {}, {}, {}
        for f in files:
            self.parse(git(repo, "show", f"{TAG}:{d}/{f}"))

    def parse(self, src):
        imports = {}
        for block in re.findall(r"^import \((.*?)^\)", src, re.S | re.M):
            for line in block.split("\n"):
                m = re.match(r'\s*(\w+)?\s*"([^"]+)"', line)
                if m:
                    imports[m.group(1) or m.group(2).rsplit("/", 1)[-1]] = m.group(2)
        for m in re.finditer(r'^import (\w+)?\s*"([^"]+)"', src, re.M):
            imports[m.group(1) or m.group(2).rsplit("/", 1)[-1]] = m.group(2)
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
            fields = []
            for line in m.group(2).split("\n"):
                line = line.strip()
                if line.startswith("//") or "`" not in line:
                    continue
                head, tag = line.split("`", 1)
                tm = re.search(r'json:"([^"]*)"', tag)
                if not tm:
                    continue
                parts = head.split()
                name, typ = (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
                opts = tm.group(1).split(",")
                if opts[0] == "-":
                    continue
                fields.append((name, typ, opts[0], opts[1:], dict(imports)))
            self.structs[m.group(1)] = fields
        for m in re.finditer(r"^type (\w+) struct\s*\{\s*\}", src, re.M):
            self.structs[m.group(1)] = []
        for m in re.finditer(r"^type (\w+) ([^\s{]+)\s*$", src, re.M):
            if m.group(2) not in ("struct", "interface"):
                self.named[m.group(1)] = (m.group(2), dict(imports))


PACKAGES = {}
def package(path):
    if path not in PACKAGES:
        PACKAGES[path] = Package(path)
    return PACKAGES[path]


OUT, DONE, TODO = [], set(), []

def resolve(pkg, typ, imports):
    """The table's type for Go type `typ` written in package `pkg`."""
    if typ.startswith("*"):
        return "*" + resolve(pkg, typ[1:], imports)
    if typ == "[]byte":
        return "string"
    if typ.startswith("[]"):
        return "[]" + resolve(pkg, typ[2:], imports)
    if typ.startswith("map["):
        depth, i = 0, 3
        while True:
            if typ[i] == "[":
                depth += 1
            elif typ[i] == "]":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        return "map:" + resolve(pkg, typ[i + 1:], imports)
    if typ in BASIC:
        return BASIC[typ]
    if typ in ("interface{}", "any"):
        return "raw"
    if "." in typ:
        alias, name = typ.split(".", 1)
        target = imports.get(alias)
        if target is None:
            raise SystemExit(f"{pkg}: unknown import {alias} in {typ}")
        return named(target, name)
    return named(pkg, typ)


def named(pkg, name):
    if (pkg, name) in SPECIAL:
        return SPECIAL[(pkg, name)]
    p = package(pkg)
    if name in p.structs:
        key = f"{short(pkg)}.{name}"
        if key not in DONE:
            DONE.add(key)
            TODO.append((pkg, name))
        return "S:" + key
    if name in p.named:
        under, imports = p.named[name]
        return resolve(pkg, under, imports)
    raise SystemExit(f"{pkg}: unknown type {name}")


def emit(pkg, name):
    OUT.append(f"S {short(pkg)}.{name}")
    for fname, typ, jname, opts, imports in package(pkg).structs[name]:
        t = resolve(pkg, typ, imports)
        if fname is None and jname == "" and "inline" in opts or (fname is None and jname == ""):
            OUT.append(f"I {t}")
            continue
        if jname == "":
            jname = fname
        omit = " omit" if ("omitempty" in opts or "omitzero" in opts) else ""
        OUT.append(f"F {jname} {t}{omit}")


kinds = []
for api_version, kind, pkg in KINDS:
    kinds.append(f"K {api_version} {kind} {named(pkg, kind)[2:]}")
    if kind not in NO_LIST:
        kinds.append(f"K {api_version} {kind}List {named(pkg, kind + 'List')[2:]}")
while TODO:
    emit(*TODO.pop(0))
print(f"# Generated by scripts/gen-go-json-layout.py from Kubernetes {TAG} (k8s.io/api, apimachinery,")
print("# apiextensions-apiserver, kube-aggregator): Go struct fields in declaration order with their JSON names and tags.")
for line in kinds + OUT:
    print(line)
