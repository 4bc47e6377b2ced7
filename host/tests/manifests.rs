//! The deployment files agree with each other and with weir: the
//! Kubernetes manifests (deploy/kubernetes) parse, have the kinds and API
//! versions the cluster serves, probe `/readyz` on the port the routes file
//! listens on, and give a drain the time the routes file asks for; the
//! ConfigMap holds the shipped routes file (deploy/routes.toml), whose
//! components exist; the systemd unit (deploy/systemd/weir.service) waits
//! for the drain and reloads with SIGHUP. `systemd-analyze verify` and the
//! image run are scripts/release.sh's and scripts/release-test.sh's.

use serde::Deserialize;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_config::Config;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of every manifest, by kind (one of each is expected).
fn manifests() -> BTreeMap<String, Value> {
    let dir = repo().join("deploy/kubernetes");
    let mut by_kind = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        assert_eq!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml"),
            "{}: only .yaml manifests here",
            path.display()
        );
        let text = read(&path);
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc = Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: a document without kind", path.display()))
                .to_string();
            let api = doc["apiVersion"].as_str().unwrap_or_default();
            let want = match kind.as_str() {
                "ConfigMap" | "Service" => "v1",
                "Deployment" => "apps/v1",
                "PodDisruptionBudget" => "policy/v1",
                "Kustomization" => "kustomize.config.k8s.io/v1beta1",
                other => panic!("{}: unexpected kind {other}", path.display()),
            };
            assert_eq!(api, want, "{}: apiVersion of a {kind}", path.display());
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            assert!(
                by_kind.insert(kind.clone(), (name, doc)).is_none(),
                "two {kind} documents"
            );
        }
    }
    // Kustomize applies exactly the other files.
    let (_, kustomization) = &by_kind["Kustomization"];
    let mut listed: Vec<String> = kustomization["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut files: Vec<String> = by_kind
        .values()
        .map(|(file, _)| file.clone())
        .filter(|f| f != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(listed, files, "kustomization.yaml resources");
    by_kind.into_iter().map(|(k, (_, doc))| (k, doc)).collect()
}

/// The shipped routes file, parsed by weir's own parser with guest paths
/// resolved against examples/ (where scripts/build-guests.sh puts wasm/).
fn shipped_routes() -> (String, Config) {
    let text = read(&repo().join("deploy/routes.toml"));
    let config = Config::parse(&text, &repo().join("examples"))
        .unwrap_or_else(|e| panic!("deploy/routes.toml: {e}"));
    (text, config)
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    serde_yaml::from_value(value.clone()).expect("a map of labels")
}

/// A container port by name or number: its number.
fn port_of(container: &Value, port: &Value) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().expect("a port name or number");
    container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

#[test]
fn the_configmap_holds_the_shipped_routes_file_and_its_components_exist() {
    let manifests = manifests();
    let (text, config) = shipped_routes();
    assert!(
        manifests["ConfigMap"]["data"]["routes.toml"].as_str() == Some(text.as_str()),
        "deploy/kubernetes/configmap.yaml's routes.toml differs from deploy/routes.toml \
         (indent the file by four spaces under `routes.toml: |`)"
    );
    let mut guests = 0;
    for route in &config.routes {
        if let weir_config::Behaviour::Guest(guest) = &route.behaviour {
            assert!(
                guest.wasm.is_file(),
                "{}: {} missing (scripts/build-guests.sh builds it; release.sh ships it)",
                route.path,
                guest.wasm.display()
            );
            guests += 1;
        }
    }
    assert!(guests > 0, "the shipped routes serve no guest");
}

#[test]
fn probes_and_service_reach_the_routes_file_listener() {
    let manifests = manifests();
    let (_, config) = shipped_routes();
    let listen = config.server.listen;
    assert!(
        listen.ip().is_unspecified(),
        "the pod's listener must take the kubelet's probes and the Service's traffic: {listen}"
    );
    let deployment = &manifests["Deployment"];
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        port_of(container, &Value::from("ws")),
        u64::from(listen.port())
    );
    let ready = &container["readinessProbe"]["httpGet"];
    assert_eq!(ready["path"].as_str(), Some("/readyz"));
    assert_eq!(port_of(container, &ready["port"]), u64::from(listen.port()));
    // Liveness must not fail while draining (/healthz is 503 then): a TCP
    // check of the listener, which stays open.
    assert!(
        container["livenessProbe"]["tcpSocket"].is_mapping(),
        "liveness: {:?}",
        container["livenessProbe"]
    );
    // The routes file is mounted where the image's entrypoint reads it,
    // from the ConfigMap.
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"].as_str() == Some("/etc/weir/routes.toml"))
        .expect("/etc/weir/routes.toml mounted");
    assert_eq!(mount["subPath"].as_str(), Some("routes.toml"));
    let volume = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_eq!(
        volume["configMap"]["name"],
        manifests["ConfigMap"]["metadata"]["name"]
    );
    // Selectors pick the pods.
    let pod_labels = labels(&pod["metadata"]["labels"]);
    for (what, selector) in [
        ("Deployment", &deployment["spec"]["selector"]["matchLabels"]),
        ("Service", &manifests["Service"]["spec"]["selector"]),
        (
            "PodDisruptionBudget",
            &manifests["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        ),
    ] {
        let selector = labels(selector);
        assert!(!selector.is_empty(), "{what} selects nothing");
        for (k, v) in &selector {
            assert_eq!(pod_labels.get(k), Some(v), "{what} selector {k}");
        }
    }
    let service_port = &manifests["Service"]["spec"]["ports"][0];
    assert_eq!(
        port_of(container, &service_port["targetPort"]),
        u64::from(listen.port())
    );
    // The image tag is this release's.
    let image = container["image"].as_str().unwrap();
    assert!(
        image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "image {image} is not weir {}",
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn a_pod_gets_time_to_leave_the_endpoints_and_drain() {
    let manifests = manifests();
    let (_, config) = shipped_routes();
    let deployment = &manifests["Deployment"];
    let spec = &deployment["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("preStop: a sleep (the image has no shell)");
    // Long enough for the endpoint removal to reach the load balancers,
    // short of the whole grace period.
    assert!((3..=30).contains(&pre_stop), "preStop sleeps {pre_stop} s");
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    let needed = Duration::from_secs(pre_stop) + config.server.drain_timeout;
    assert!(
        Duration::from_secs(grace) >= needed + Duration::from_secs(5),
        "terminationGracePeriodSeconds {grace} s < preStop {pre_stop} s + drain_timeout {:?} + 5 s",
        config.server.drain_timeout
    );
    // A rollout drains an old pod only once a new one is ready; a budget
    // that equals the replicas would block every node drain.
    let strategy = &deployment["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(strategy["maxUnavailable"].as_u64(), Some(0));
    let replicas = deployment["spec"]["replicas"].as_u64().unwrap();
    let min = manifests["PodDisruptionBudget"]["spec"]["minAvailable"]
        .as_u64()
        .unwrap();
    assert!(
        (1..replicas).contains(&min),
        "minAvailable {min} of {replicas}"
    );
    // The root file system is read-only: the component cache goes to the
    // writable /tmp.
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let cache = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("WEIR_CACHE_DIR"))
        .expect("WEIR_CACHE_DIR");
    assert!(cache["value"].as_str().unwrap().starts_with("/tmp/"));
}

/// The unit's settings, `Key=value` lines (repeated keys in order).
fn unit(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l.split_once('=').expect("Key=value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn seconds(value: &str) -> Duration {
    let n = value.trim_end_matches('s');
    Duration::from_secs(n.parse().unwrap_or_else(|_| panic!("{value}: seconds")))
}

#[test]
fn the_systemd_unit_drains_reloads_and_runs_unprivileged() {
    let text = read(&repo().join("deploy/systemd/weir.service"));
    let settings = unit(&text);
    let get = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let (_, config) = shipped_routes();
    assert_eq!(
        get("ExecStart"),
        ["/usr/local/bin/weir serve /etc/weir/routes.toml"]
    );
    // The reload checks the file, then sends SIGHUP to weir itself.
    assert_eq!(
        get("ExecReload"),
        [
            "/usr/local/bin/weir check /etc/weir/routes.toml",
            "/bin/kill -HUP $MAINPID"
        ]
    );
    assert!(
        seconds(get("TimeoutStopSec")[0]) > config.server.drain_timeout,
        "TimeoutStopSec must exceed drain_timeout {:?}",
        config.server.drain_timeout
    );
    for (key, want) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        ("Environment", "WEIR_CACHE_DIR=/var/cache/weir"),
        ("CacheDirectory", "weir"),
    ] {
        assert_eq!(get(key), [want], "{key}");
    }
    let nofile: u64 = get("LimitNOFILE")[0].parse().unwrap();
    assert!(nofile >= 65536, "LimitNOFILE {nofile}");
    // Cranelift writes machine code at run time: this option would break
    // every guest.
    assert!(get("MemoryDenyWriteExecute").is_empty());
}
