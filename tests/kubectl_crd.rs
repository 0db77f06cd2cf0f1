//! CustomResourceDefinitions with the real kubectl (1.32): a CRD with a schema, printer columns and the
//! status and scale subresources is applied and established; custom objects are validated, defaulted and
//! pruned by their schema, patched (merge; strategic is refused with upstream's 415), scaled and
//! explained; bad CRDs get 422 causes; deleting the CRD deletes its objects and the resource type; and a
//! CRD created through one member is served by the others.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test stops loudly at the first failed step

use std::time::Duration;

use keel_testkit::keel_bin;
use keel_testkit::kube::{Background, KubeCluster};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields:
    - jsonPath: .spec.color
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Mode
      type: string
      jsonPath: .spec.mode
      priority: 1
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: WidgetSpec is what a widget should be.
            required: [color]
            properties:
              replicas:
                type: integer
                minimum: 0
                default: 1
                description: How many widget replicas to run.
              color:
                type: string
                enum: [red, green, blue]
              mode:
                type: string
                default: fast
              size:
                x-kubernetes-int-or-string: true
              ports:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: integer}
                    protocol: {type: string, default: TCP}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
"#;

const CR: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
spec:
  color: red
  size: 10Gi
  bogus: 1
  ports:
  - port: 80
    junk: x
  extra:
    anything: [1, 2]
"#;

fn establish(c: &KubeCluster, i: usize) {
    let out = c.ok_stdin(i, &["apply", "-f", "-"], Some(CRD));
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"),
        "{out}"
    );
    let out = c.ok(
        i,
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=30s",
            "crd/widgets.example.com",
        ],
    );
    assert!(out.contains("condition met"), "{out}");
}

#[test]
fn custom_resources_with_kubectl() {
    let c = KubeCluster::start(keel_bin!(), 1);
    establish(&c, 0);
    let crds = c.ok(0, &["get", "crd"]);
    assert!(
        crds.starts_with("NAME")
            && crds.contains("CREATED AT")
            && crds.contains("widgets.example.com"),
        "{crds}"
    );
    let res = c.ok(0, &["api-resources", "--api-group=example.com"]);
    assert!(
        res.contains("widgets") && res.contains("wd") && res.contains("Widget"),
        "{res}"
    );

    // Unknown fields: kubectl asks for Strict validation, which refuses them as upstream does.
    let strict = c.err_stdin(0, &["apply", "-f", "-"], Some(CR));
    assert!(
        strict.contains(r#"strict decoding error: unknown field "spec.bogus""#),
        "{strict}"
    );
    // Without validation the object is created, defaulted and pruned.
    c.ok_stdin(0, &["apply", "--validate=false", "-f", "-"], Some(CR));
    let y = c.ok(0, &["get", "widget", "w1", "-o", "yaml"]);
    assert!(
        y.contains("replicas: 1") && y.contains("mode: fast") && y.contains("protocol: TCP"),
        "{y}"
    );
    // (last-applied-configuration keeps what was sent; the object itself must not.)
    let spec = y.split("\nspec:").nth(1).unwrap_or("");
    assert!(
        !spec.contains("bogus") && !spec.contains("junk"),
        "unknown fields must be pruned:\n{y}"
    );
    assert!(
        y.contains("anything:") && y.contains("size: 10Gi"),
        "preserved fields must stay:\n{y}"
    );

    let table = c.ok(0, &["get", "widgets"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "REPLICAS", "COLOR", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(row[..3], ["w1", "1", "red"], "{table}");
    let wide = c.ok(0, &["get", "wd", "-o", "wide"]);
    assert!(wide.contains("MODE") && wide.contains("fast"), "{wide}");

    // Schema violations name their fields.
    let bad = c.err_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {replicas: three, color: purple}\n"),
    );
    assert!(
        bad.contains(r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#),
        "{bad}"
    );
    assert!(
        bad.contains(
            r#"spec.color: Unsupported value: "purple": supported values: "red", "green", "blue""#
        ),
        "{bad}"
    );
    let missing = c.err_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {replicas: 2}\n"),
    );
    assert!(
        missing.contains(r#"The Widget "bad" is invalid: spec.color: Required value"#),
        "{missing}"
    );
    let negative = c.err(
        0,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":-1}}"#,
        ],
    );
    assert!(
        negative.contains("spec.replicas in body should be greater than or equal to 0"),
        "{negative}"
    );

    // Patches: merge works, strategic gets upstream's 415.
    c.ok(
        0,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"color":"blue"}}"#,
        ],
    );
    let smp = c.err(
        0,
        &[
            "patch",
            "widget",
            "w1",
            "--type=strategic",
            "-p",
            r#"{"spec":{"color":"green"}}"#,
        ],
    );
    assert!(
        smp.contains("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"),
        "{smp}"
    );

    // Scale and status.
    let scaled = c.ok(0, &["scale", "widget", "w1", "--replicas=4"]);
    assert!(scaled.contains("widget.example.com/w1 scaled"), "{scaled}");
    let got = c.ok(
        0,
        &[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.replicas} {.spec.color} {.metadata.generation}",
        ],
    );
    assert_eq!(got, "4 blue 3");
    c.ok(
        0,
        &[
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":4,"selector":"app=w1"},"spec":{"color":"green"}}"#,
        ],
    );
    let scale = c.ok(
        0,
        &[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
        ],
    );
    let scale: serde_json::Value = serde_json::from_str(&scale).expect("scale json");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"]["replicas"], 4);
    assert_eq!(scale["status"]["selector"], "app=w1");
    let color = c.ok(
        0,
        &[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.color} {.metadata.generation}",
        ],
    );
    assert_eq!(
        color, "blue 3",
        "a status write changes neither spec nor generation"
    );

    // Server-side apply on a custom object: defaults, conflicts between managers, force, and /scale ownership.
    let w2 = |color: &str, replicas: Option<u32>| {
        let r = replicas
            .map(|n| format!("\n  replicas: {n}"))
            .unwrap_or_default();
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  color: {color}{r}\n")
    };
    let out = c.ok_stdin(
        0,
        &["apply", "--server-side", "-f", "-"],
        Some(&w2("red", Some(2))),
    );
    assert!(
        out.contains("widget.example.com/w2 serverside-applied"),
        "{out}"
    );
    let got = c.ok(
        0,
        &[
            "get",
            "widget",
            "w2",
            "-o",
            "jsonpath={.spec.replicas} {.spec.color} {.spec.mode}",
        ],
    );
    assert_eq!(
        got, "2 red fast",
        "applied fields plus the schema's default"
    );
    let conflict = c.err_stdin(
        0,
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        Some(&w2("blue", None)),
    );
    assert!(
        conflict.contains("conflict with \"kubectl\"") && conflict.contains(".spec.color"),
        "{conflict}"
    );
    c.ok_stdin(
        0,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&w2("blue", None)),
    );
    let managers = c.ok(
        0,
        &["get", "widget", "w2", "--show-managed-fields", "-o", "json"],
    );
    let managers: serde_json::Value = serde_json::from_str(&managers).expect("w2 json");
    let owns_color = |m: &str| {
        managers["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["manager"] == m && !e["fieldsV1"]["f:spec"]["f:color"].is_null())
    };
    assert!(owns_color("other") && !owns_color("kubectl"), "{managers}");
    c.ok(0, &["scale", "widget", "w2", "--replicas=5"]);
    let conflict = c.err_stdin(
        0,
        &["apply", "--server-side", "-f", "-"],
        Some(&w2("blue", Some(2))),
    );
    assert!(
        conflict.contains(".spec.replicas") && conflict.contains("subresource \"scale\""),
        "{conflict}"
    );

    c.ok(0, &["delete", "widget", "w2"]);

    // Explain reads the CRD's schema from OpenAPI.
    let explain = c.ok(0, &["explain", "widget.spec"]);
    assert!(
        explain.contains("WidgetSpec is what a widget should be.") && explain.contains("replicas"),
        "{explain}"
    );
    let explain = c.ok(0, &["explain", "widgets.spec.replicas"]);
    assert!(
        explain.contains("How many widget replicas to run."),
        "{explain}"
    );

    // Watch sees changes; label selectors work.
    c.ok(0, &["label", "widget", "w1", "tier=gold"]);
    let sel = c.ok(0, &["get", "widgets", "-l", "tier=gold", "-o", "name"]);
    assert_eq!(sel.trim(), "widget.example.com/w1");
    let blue = c.ok(
        0,
        &[
            "get",
            "widgets",
            "--field-selector",
            "spec.color=blue",
            "-o",
            "name",
        ],
    );
    assert_eq!(
        blue.trim(),
        "widget.example.com/w1",
        "selectableFields serve field selectors"
    );
    let none = c.ok(
        0,
        &[
            "get",
            "widgets",
            "--field-selector",
            "metadata.name=nope",
            "-o",
            "name",
        ],
    );
    assert!(none.trim().is_empty(), "{none}");

    // A HorizontalPodAutoscaler scales a custom resource through its /scale (found by discovery): above
    // maxReplicas it is brought down to it; a target that does not exist is reported in the conditions.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w9}\nspec: {color: red, replicas: 4}\n"),
    );
    c.ok(
        0,
        &[
            "patch",
            "widget",
            "w9",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":4,"selector":"app=w9"}}"#,
        ],
    );
    let hpas = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: w9}
spec:
  scaleTargetRef: {apiVersion: example.com/v1, kind: Widget, name: w9}
  maxReplicas: 2
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ghost}
spec:
  scaleTargetRef: {apiVersion: example.com/v1, kind: Gadget, name: g}
  minReplicas: 1
  maxReplicas: 2
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: AverageValue, averageValue: 100Mi}}
"#;
    c.ok_stdin(0, &["apply", "-f", "-"], Some(hpas));
    c.wait_until("the HPA to scale w9 to 2", Duration::from_secs(60), || {
        c.kubectl(
            0,
            &["get", "widget", "w9", "-o", "jsonpath={.spec.replicas}"],
        )
        .stdout
            == "2"
    });
    c.wait_until("the rescale Event", Duration::from_secs(30), || {
        c.kubectl(
            0,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=w9,reason=SuccessfulRescale",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        )
        .stdout
        .contains("New size: 2; reason: Current number of replicas above Spec.MaxReplicas")
    });
    c.wait_until("the missing target in the conditions", Duration::from_secs(30), || {
        c.kubectl(
            0,
            &["get", "hpa", "ghost", "-o", r#"jsonpath={.status.conditions[?(@.type=="AbleToScale")].message}"#],
        )
        .stdout
        .contains(r#"the HPA controller was unable to get the target's current scale: no matches for kind "Gadget" in group "example.com""#)
    });
    let table = c.ok(0, &["get", "hpa", "--no-headers"]);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows.iter().any(|r| r.starts_with("ghost ")
            && r.contains("Gadget/g")
            && r.contains("memory: <unknown>/100Mi")),
        "{table}"
    );
    assert!(
        rows.iter().any(|r| r.starts_with("w9 ")
            && r.contains("Widget/w9")
            && r.contains("cpu: <unknown>/80%")),
        "{table}"
    );
    let invalid = c.err_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec: {scaleTargetRef: {kind: Widget, name: w9}, minReplicas: 3, maxReplicas: 2}\n"),
    );
    assert!(
        invalid.contains(
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"
        ),
        "{invalid}"
    );
    c.ok(0, &["delete", "hpa", "w9", "ghost"]);
    c.ok(0, &["delete", "widget", "w9"]);

    // Deleting the CRD deletes its objects and the resource type.
    c.ok(0, &["create", "namespace", "other"]);
    c.ok_stdin(
        0,
        &["-n", "other", "apply", "--validate=false", "-f", "-"],
        Some(CR),
    );
    let all = c.ok(0, &["get", "wd", "-A", "-o", "name"]);
    assert_eq!(all.lines().count(), 2, "{all}");
    let del = c.ok(
        0,
        &["delete", "crd", "widgets.example.com", "--timeout=30s"],
    );
    assert!(del.contains("deleted"), "{del}");
    let gone = c.err(0, &["get", "widgets"]);
    assert!(
        gone.contains(r#"the server doesn't have a resource type "widgets""#),
        "{gone}"
    );
    let crds = c.kubectl(0, &["get", "crd", "-o", "name"]);
    assert!(crds.stdout.trim().is_empty(), "{crds:?}");
    // The objects are gone too: a CRD of the same name starts empty.
    establish(&c, 0);
    c.wait_until("an empty widget list", Duration::from_secs(10), || {
        let r = c.kubectl(0, &["get", "wd", "-A", "-o", "name"]);
        r.ok && r.stdout.trim().is_empty()
    });
}

#[test]
fn bad_crds_are_refused_with_causes() {
    let c = KubeCluster::start(keel_bin!(), 1);
    let bad = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.wrong
spec:
  group: example
  scope: Sometimes
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            properties:
              a: {type: string}
  - name: v2
    served: true
    storage: true
"#;
    let e = c.err_stdin(0, &["apply", "-f", "-"], Some(bad));
    for want in [
        r#"The CustomResourceDefinition "gadgets.wrong" is invalid"#,
        r#"metadata.name: Invalid value: "gadgets.wrong": must be spec.names.plural+"."+spec.group"#,
        r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#,
        r#"spec.scope: Unsupported value: "Sometimes": supported values: "Cluster", "Namespaced""#,
        "spec.versions: Invalid value: \"v1,v2\": must have exactly one version marked as storage version",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
        "spec.versions[1].schema.openAPIV3Schema: Required value: schemas are required",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    let typo = CRD.replace(
        "    storage: true\n",
        "    storage: true\n    storrage: false\n",
    );
    let e = c.err_stdin(0, &["apply", "-f", "-"], Some(&typo));
    assert!(
        e.contains(r#"strict decoding error: unknown field "spec.versions[0].storrage""#),
        "{e}"
    );
    let bad_name = CRD.replace("plural: widgets", "plural: Widgets!");
    let e = c.err_stdin(0, &["apply", "-f", "-"], Some(&bad_name));
    assert!(
        e.contains("spec.names.plural: Invalid value: \"Widgets!\""),
        "{e}"
    );
    // A cluster-scoped CRD serves objects without a namespace.
    let cluster = CRD
        .replace("scope: Namespaced", "scope: Cluster")
        .replace("widgets", "knobs")
        .replace("widget", "knob")
        .replace("Widget", "Knob")
        .replace("shortNames: [wd]", "shortNames: [kn]");
    c.ok_stdin(0, &["apply", "-f", "-"], Some(&cluster));
    c.ok(
        0,
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=30s",
            "crd/knobs.example.com",
        ],
    );
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some(
            "apiVersion: example.com/v1\nkind: Knob\nmetadata: {name: k1}\nspec: {color: green}\n",
        ),
    );
    let got = c.ok(
        0,
        &[
            "get",
            "knob",
            "k1",
            "-o",
            "jsonpath={.metadata.namespace}|{.spec.replicas}",
        ],
    );
    assert_eq!(got, "|1");
    c.ok(0, &["delete", "knob", "k1"]);

    // A CRD whose objects have finalizers waits for them, refusing new objects meanwhile.
    c.ok_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Knob\nmetadata: {name: held, finalizers: [example.com/hold]}\nspec: {color: red}\n"),
    );
    c.ok(0, &["delete", "crd", "knobs.example.com", "--wait=false"]);
    c.wait_until("the CRD to be Terminating", Duration::from_secs(15), || {
        c.kubectl(
            0,
            &[
                "get",
                "crd",
                "knobs.example.com",
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Terminating")].status}"#,
            ],
        )
        .stdout
            == "True"
    });
    let refused = c.err_stdin(
        0,
        &["create", "-f", "-"],
        Some(
            "apiVersion: example.com/v1\nkind: Knob\nmetadata: {name: late}\nspec: {color: red}\n",
        ),
    );
    assert!(
        refused.contains("create not allowed while custom resource definition is terminating"),
        "{refused}"
    );
    c.ok(
        0,
        &[
            "patch",
            "knob",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    c.wait_until("the CRD to be gone", Duration::from_secs(15), || {
        let r = c.kubectl(0, &["get", "crd", "knobs.example.com"]);
        !r.ok && r.stderr.contains("NotFound")
    });

    // x-kubernetes-int-or-string may spell out its two types under anyOf (as controller-gen writes
    // it): a structural schema upstream, so the CRD is accepted and its field takes both.
    let int_or_string = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: dials.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: dials, kind: Dial}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              port:
                x-kubernetes-int-or-string: true
                anyOf:
                - type: integer
                - type: string
"#;
    let out = c.ok_stdin(0, &["apply", "-f", "-"], Some(int_or_string));
    assert!(out.contains("dials.example.com created"), "{out}");
    c.ok(
        0,
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=30s",
            "crd/dials.example.com",
        ],
    );
    for (name, port) in [("by-number", "8080"), ("by-name", "http")] {
        c.ok_stdin(
            0,
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: example.com/v1\nkind: Dial\nmetadata: {{name: {name}}}\nspec: {{port: {port}}}\n"
            )),
        );
    }
    let got = c.ok(0, &["get", "dials", "-o", "jsonpath={.items[*].spec.port}"]);
    assert_eq!(got, "http 8080");
    let e = c.err_stdin(
        0,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Dial\nmetadata: {name: by-flag}\nspec: {port: true}\n"),
    );
    assert!(
        e.contains(r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#),
        "{e}"
    );
}

#[test]
fn crd_served_by_every_member() {
    let c = KubeCluster::start(keel_bin!(), 3);
    establish(&c, 0);
    let t = std::time::Instant::now();
    // The other members learn of the CRD from their own store's watch.
    c.wait_until("member 2 serves widgets", Duration::from_secs(15), || {
        c.kubectl(2, &["get", "widgets"]).ok
    });
    eprintln!(
        "member 2 served the CRD {:?} after it was established through member 0",
        t.elapsed()
    );
    c.ok_stdin(
        1,
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: shared}\nspec: {color: green}\n"),
    );
    c.wait_until("member 2 lists the widget", Duration::from_secs(15), || {
        let r = c.kubectl(2, &["get", "widgets", "-o", "name"]);
        r.ok && r.stdout.contains("widget.example.com/shared")
    });
    let row = c.ok(2, &["get", "wd", "shared"]);
    assert!(row.contains("green"), "{row}");
    // A namespace with custom objects in it is emptied and deleted like any other.
    c.ok(2, &["create", "namespace", "doomed"]);
    c.ok_stdin(
        0,
        &["-n", "doomed", "apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: inside}\nspec: {color: red}\n"),
    );
    c.ok(1, &["delete", "namespace", "doomed", "--timeout=30s"]);
    let left = c.kubectl(2, &["get", "namespace", "doomed"]);
    assert!(!left.ok && left.stderr.contains("NotFound"), "{left:?}");
    // A watch of widgets sees their deletion, then ends when the CRD is gone.
    let mut watch = Background::start(&c, 2, &["get", "widgets", "-w", "-o", "name"], "crd-watch");
    c.wait_until(
        "the watch to list the widget",
        Duration::from_secs(10),
        || watch.output().contains("widget.example.com/shared"),
    );
    // deletecollection, as `kubectl delete --raw` sends it.
    c.ok(
        2,
        &[
            "delete",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets",
        ],
    );
    c.wait_until(
        "the collection to be empty",
        Duration::from_secs(10),
        || {
            let r = c.kubectl(0, &["get", "widgets", "-o", "name"]);
            r.ok && r.stdout.trim().is_empty()
        },
    );
    c.ok(
        1,
        &["delete", "crd", "widgets.example.com", "--timeout=30s"],
    );
    c.wait_until(
        "member 0 stops serving widgets",
        Duration::from_secs(15),
        || {
            let r = c.kubectl(0, &["get", "widgets"]);
            !r.ok && r.stderr.contains("doesn't have a resource type")
        },
    );
    c.wait_until("the widget watch to end", Duration::from_secs(15), || {
        watch.exited().is_some()
    });
}
