//! Every rule of the routes file, and every error with its line and the
//! suggestion it gives.

use super::*;

fn parse(text: &str) -> Config {
    match Config::parse(text, Path::new("/etc/weir")) {
        Ok(config) => config,
        Err(err) => panic!("expected {text:?} to parse, got: {err}"),
    }
}

/// Asserts that `text` is refused on `line` with a message containing each
/// of `needles` (the offending value and what to write instead).
#[track_caller]
fn refused(text: &str, line: usize, needles: &[&str]) -> ConfigError {
    let err = match Config::parse(text, Path::new("/etc/weir")) {
        Ok(_) => panic!("expected {text:?} to be refused"),
        Err(err) => err,
    };
    assert_eq!(err.line, Some(line), "wrong line in: {err}");
    assert!(
        err.message.starts_with(&format!("line {line}: ")),
        "message does not start with its line: {err}"
    );
    for needle in needles {
        assert!(
            err.message.contains(needle),
            "{needle:?} missing from: {err}"
        );
    }
    err
}

const ECHO: &str = "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n";

fn guest_route(extra: &str) -> String {
    format!("[[route]]\npath = \"/g\"\nguest = \"g.wasm\"\n{extra}\n")
}

fn only_guest(config: &Config) -> &GuestConfig {
    match &config.routes[0].behaviour {
        Behaviour::Guest(guest) => guest,
        other => panic!("expected a guest route, got {other:?}"),
    }
}

#[test]
fn full_file_with_every_key() {
    let config = parse(
        r#"# weir routes
[server]
listen = "0.0.0.0:8080"
workers = 3
max_message = "16MiB"
outbound_budget = "1MiB"
idle_timeout = "2m"
handshake_timeout = "5s"
drain_timeout = "20s"
subprotocols = ["chat.v2", "chat.v1"]
max_connections = 5000
max_connections_per_ip = 100
cache_dir = "cache"
reuse_port = true

[[route]]
path = "/echo"
native = "echo"
max_message = 1024

[[route]]
path = "/rooms/{room}"
guest = "wasm/chat.wasm"
isolation = "batch"
memory = "16MiB"
timeout = "10ms"
instances = 8
recycle_after = 50
attachment_max = "4KiB"
idle_timeout = "30s"
subprotocols = []
env = { WEIR_AUTH_TOKEN = "let-me-in", MODE = "test" }

[[route]]
path = "/files/*"
native = "relay"
"#,
    );
    let server = &config.server;
    assert_eq!(server.listen, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(server.workers, 3);
    assert_eq!(server.handshake_timeout, Duration::from_secs(5));
    assert_eq!(server.drain_timeout, Duration::from_secs(20));
    assert_eq!(server.max_connections, 5000);
    assert_eq!(server.max_connections_per_ip, 100);
    assert_eq!(server.cache_dir, Some(PathBuf::from("/etc/weir/cache")));
    assert!(server.reuse_port);
    assert_eq!(
        server.limits,
        Limits {
            max_message: 16 << 20,
            outbound_budget: 1 << 20,
            idle_timeout: Duration::from_secs(120),
            subprotocols: vec!["chat.v2".into(), "chat.v1".into()],
            origins: Vec::new(),
            compression: Default::default(),
            require_origin: false,
            rates: Default::default(),
        }
    );

    let [echo, chat, files] = &config.routes[..] else {
        panic!("expected three routes, got {:?}", config.routes);
    };
    assert_eq!((echo.path.as_str(), echo.line), ("/echo", 16));
    assert_eq!(echo.behaviour, Behaviour::Native(NativeKind::Echo));
    // A route override replaces one key; the others come from [server].
    assert_eq!(echo.limits.max_message, 1024);
    assert_eq!(echo.limits.outbound_budget, 1 << 20);
    assert_eq!(echo.limits.subprotocols, server.limits.subprotocols);

    assert_eq!((chat.path.as_str(), chat.line), ("/rooms/{room}", 21));
    let mut env = BTreeMap::new();
    env.insert("MODE".to_string(), "test".to_string());
    env.insert("WEIR_AUTH_TOKEN".to_string(), "let-me-in".to_string());
    assert_eq!(
        chat.behaviour,
        Behaviour::Guest(GuestConfig {
            wasm: PathBuf::from("/etc/weir/wasm/chat.wasm"),
            oci: None,
            isolation: Isolation::Batch,
            memory: 16 << 20,
            timeout: Duration::from_millis(10),
            instances: 8,
            recycle_after: 50,
            attachment_max: 4 << 10,
            env,
            log: GuestLog::default(),
            cpu_share: DEFAULT_GUEST_CPU_SHARE_PERCENT,
            outbound: Box::default(),
            kv: None,
            kv_quota: KvQuota::default(),
            realtime: false,
        })
    );
    assert_eq!(chat.limits.idle_timeout, Duration::from_secs(30));
    assert!(chat.limits.subprotocols.is_empty());
    assert_eq!(chat.limits.max_message, 16 << 20);

    // The file's `/files/*` is matchit's catch-all.
    assert_eq!((files.path.as_str(), files.line), ("/files/{*rest}", 34));
    assert_eq!(files.behaviour, Behaviour::Native(NativeKind::Relay));
}

#[test]
fn defaults_without_a_server_section() {
    let config = parse(&format!("{ECHO}\n{}", guest_route("")));
    assert_eq!(config.server.listen, DEFAULT_LISTEN.parse().unwrap());
    assert_eq!(config.server.workers, default_workers());
    assert_eq!(config.server.handshake_timeout, DEFAULT_HANDSHAKE_TIMEOUT);
    assert_eq!(config.server.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
    assert_eq!(config.server.limits, Limits::default());
    assert_eq!(config.server.max_connections, DEFAULT_MAX_CONNECTIONS);
    assert_eq!(config.server.max_connections_per_ip, 0);
    assert_eq!(config.server.cache_dir, None);
    assert!(!config.server.reuse_port, "sharing the address is opt-in");
    assert_eq!(config.source, None);
    let Behaviour::Guest(guest) = &config.routes[1].behaviour else {
        panic!("second route is a guest");
    };
    assert_eq!(
        guest,
        &GuestConfig::defaults(PathBuf::from("/etc/weir/g.wasm"))
    );
    assert_eq!(guest.isolation, Isolation::Worker);
    assert_eq!(guest.memory, 64 << 20);
    assert_eq!(guest.timeout, Duration::from_millis(100));
    assert_eq!(guest.instances, 256);
    assert_eq!(guest.recycle_after, 10_000);
    assert_eq!(guest.attachment_max, 16 << 10);
}

#[test]
fn zero_workers_means_one_per_core() {
    let config = parse(&format!("[server]\nworkers = 0\n{ECHO}"));
    assert_eq!(config.server.workers, default_workers());
    assert!(config.server.workers >= 1);
}

#[test]
fn builtin_default_is_the_documented_file() {
    let file = parse(
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n[[route]]\npath = \"/relay\"\nnative = \"relay\"\n",
    );
    let builtin = Config::builtin_default();
    assert_eq!(builtin.server.listen, file.server.listen);
    assert_eq!(builtin.server.limits, file.server.limits);
    let shape = |c: &Config| {
        c.routes
            .iter()
            .map(|r| (r.path.clone(), r.behaviour.clone(), r.limits.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&builtin), shape(&file));
}

#[test]
fn router_matches_exact_prefix_and_parameters() {
    let config = parse(
        "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n\
         [[route]]\npath = \"/chat/*\"\nnative = \"relay\"\n\
         [[route]]\npath = \"/rooms/{room}\"\nnative = \"relay\"\n\
         [[route]]\npath = \"/rooms/lobby\"\nnative = \"echo\"\n",
    );
    let router = config.router();
    assert_eq!(*router.at("/echo").unwrap().value, 0);
    assert!(router.at("/echo/more").is_err());
    assert_eq!(*router.at("/chat/general/today").unwrap().value, 1);
    let room = router.at("/rooms/42").unwrap();
    assert_eq!((*room.value, room.params.get("room")), (2, Some("42")));
    // A fixed segment wins over a parameter.
    assert_eq!(*router.at("/rooms/lobby").unwrap().value, 3);
    assert!(router.at("/nowhere").is_err());
}

// ---- sizes ----

#[test]
fn size_that_is_not_a_size() {
    refused(
        "[server]\nmax_message = \"32 megs\"\n",
        2,
        &[
            r#"max_message = "32 megs": not a size; write e.g. "32MiB", "512KiB" or a number of bytes"#,
        ],
    );
}

#[test]
fn size_with_a_decimal_unit() {
    refused(
        "[server]\n\noutbound_budget = \"4MB\"\n",
        3,
        &[
            r#"outbound_budget = "4MB""#,
            r#"binary units"#,
            r#"write "4MiB""#,
        ],
    );
}

#[test]
fn size_negative_or_wrong_type() {
    refused(
        "[server]\nmax_message = -5\n",
        2,
        &["cannot be negative", "\"32MiB\""],
    );
    refused(
        "[server]\nmax_message = true\n",
        2,
        &["not a size", "\"32MiB\""],
    );
}

#[test]
fn reuse_port_is_a_flag() {
    refused(
        "[server]\nlisten = \"127.0.0.1:9001\"\nreuse_port = \"yes\"\n",
        3,
        &[r#"reuse_port = "yes": not true or false; write e.g. true"#],
    );
}

#[test]
fn listen_backlog_is_a_positive_count() {
    refused("[server]\nlisten_backlog = 0\n", 2, &["listen_backlog = 0"]);
    let route = "[[route]]\npath = \"/echo\"\nnative = \"echo\"\n";
    let set = parse(&format!("[server]\nlisten_backlog = 512\n{route}"));
    assert_eq!(set.server.listen_backlog, 512);
    assert_eq!(
        parse(route).server.listen_backlog,
        crate::DEFAULT_LISTEN_BACKLOG
    );
}

#[test]
fn size_out_of_range() {
    refused(
        "[server]\nmax_message = 0\n",
        2,
        &["too small", "at least \"1B\""],
    );
    refused(
        "[server]\nmax_message = \"2GiB\"\n",
        2,
        &["too large", "at most \"1GiB\""],
    );
    let memory = guest_route("memory = \"1KiB\"");
    refused(&memory, 4, &["memory = \"1KiB\"", "at least \"64KiB\""]);
    let memory = guest_route("memory = \"8GiB\"");
    refused(&memory, 4, &["at most \"1GiB\""]);
    let attachment = guest_route("attachment_max = \"2MiB\"");
    refused(&attachment, 4, &["attachment_max", "at most \"1MiB\""]);
}

#[test]
fn plain_integer_sizes_are_bytes() {
    let config = parse(&guest_route("memory = 131072\nattachment_max = 0"));
    assert_eq!(only_guest(&config).memory, 128 << 10);
    assert_eq!(only_guest(&config).attachment_max, 0);
}

// ---- durations ----

#[test]
fn duration_without_a_unit() {
    refused(
        "[server]\nidle_timeout = 30\n",
        2,
        &[
            "idle_timeout = 30: a duration needs a unit",
            r#"write e.g. "30s" or "30ms""#,
        ],
    );
}

#[test]
fn duration_that_is_not_a_duration() {
    refused(
        &guest_route("timeout = \"fast\""),
        4,
        &[
            r#"timeout = "fast": not a duration"#,
            r#""30s", "10ms", "2m" or "1h""#,
        ],
    );
}

#[test]
fn duration_out_of_range() {
    refused(
        &guest_route("timeout = \"2m\""),
        4,
        &["too long", "at most \"1m\""],
    );
    refused(
        "[server]\nhandshake_timeout = \"0s\"\n",
        2,
        &["too short", "at least \"1ms\""],
    );
    refused(
        "[server]\nidle_timeout = \"48h\"\n",
        2,
        &["too long", "at most \"24h\""],
    );
}

// ---- counts and addresses ----

#[test]
fn listen_must_be_an_address() {
    refused(
        "[server]\nlisten = \"localhost\"\n",
        2,
        &[
            r#"listen = "localhost": not an IP address and port"#,
            r#""127.0.0.1:9001""#,
        ],
    );
    refused(
        "[server]\nlisten = 9001\n",
        2,
        &["not a string", r#""127.0.0.1:9001""#],
    );
}

#[test]
fn counts() {
    refused(
        "[server]\nworkers = 5000\n",
        2,
        &["out of range", "from 0 to 1024"],
    );
    refused(
        "[server]\nworkers = \"4\"\n",
        2,
        &["without quotes", "write workers = 4"],
    );
    refused(
        "[server]\nworkers = \"four\"\n",
        2,
        &["not a number", "from 0 to 1024"],
    );
    refused(
        &guest_route("instances = 0"),
        4,
        &["instances = 0", "from 1 to"],
    );
    refused(
        &guest_route("recycle_after = -1"),
        4,
        &["recycle_after = -1", "from 1 to"],
    );
}

#[test]
fn subprotocols() {
    refused(
        "[server]\nsubprotocols = \"chat\"\n",
        2,
        &["not a list of names", r#"["chat.v2", "chat.v1"]"#],
    );
    refused(
        "[server]\nsubprotocols = [\"a b\"]\n",
        2,
        &["not a valid subprotocol name"],
    );
    refused(
        "[server]\nsubprotocols = [\"a\", \"a\"]\n",
        2,
        &["listed twice"],
    );
    refused("[server]\nsubprotocols = [1]\n", 2, &["is not a string"]);
}

// ---- keys ----

#[test]
fn unknown_key_in_server() {
    refused(
        "[server]\nlisten = \"127.0.0.1:1\"\nmax_mesage = \"1MiB\"\n",
        3,
        &[
            "unknown key \"max_mesage\" in [server]",
            "did you mean max_message?",
            "valid keys: listen, workers, max_message",
        ],
    );
}

#[test]
fn unknown_key_in_route() {
    refused(
        &format!("{ECHO}\n[[route]]\npath = \"/x\"\nnative = \"echo\"\nbehaviour = \"echo\"\n"),
        8,
        &[
            "unknown key \"behaviour\" in [[route]]",
            "valid keys: path, native, guest",
        ],
    );
}

#[test]
fn unknown_key_at_the_top() {
    refused(
        &format!("listen = \"127.0.0.1:1\"\n{ECHO}"),
        1,
        &[
            "unknown key \"listen\" in the top level",
            "listen belongs under [server]",
        ],
    );
    refused(&format!("{ECHO}[servr]\n"), 4, &["did you mean [server]?"]);
}

#[test]
fn guest_keys_on_a_native_route() {
    refused(
        &format!("{ECHO}memory = \"16MiB\"\n"),
        4,
        &[
            "memory only applies to guest routes",
            r#"native = "echo""#,
            r#"remove memory, or replace native with guest = "file.wasm""#,
        ],
    );
    refused(
        &format!("{ECHO}env = {{ A = \"b\" }}\n"),
        4,
        &["env only applies to guest routes"],
    );
}

#[test]
fn route_needs_exactly_one_behaviour() {
    refused(
        "\n[[route]]\npath = \"/x\"\n",
        2,
        &[
            r#"route "/x" says nothing about what serves it"#,
            r#"native = "echo""#,
            r#"guest = "file.wasm""#,
        ],
    );
    refused(
        "[[route]]\npath = \"/x\"\nnative = \"echo\"\nguest = \"x.wasm\"\n",
        3,
        &["either native or guest, not both"],
    );
    refused(
        "[[route]]\npath = \"/x\"\nnative = \"proxi\"\n",
        3,
        &[
            r#"native = "proxi": unknown native behaviour"#,
            r#"native = "echo", "relay", "pubsub", "proxy", "centrifugo" or "pusher""#,
        ],
    );
}

#[test]
fn isolation_values() {
    refused(
        &guest_route("isolation = \"process\""),
        4,
        &[
            r#"isolation = "process": unknown isolation"#,
            r#""worker""#,
            r#""batch""#,
        ],
    );
}

#[test]
fn env_values_are_strings() {
    refused(
        &guest_route("[route.env]\nPORT = 80"),
        5,
        &[
            "PORT = 80: environment values are strings",
            r#"write PORT = "80""#,
        ],
    );
    refused(
        &guest_route("env = 3"),
        4,
        &["env is a table", "WEIR_AUTH_TOKEN"],
    );
}

#[test]
fn empty_guest_file() {
    refused(
        "[[route]]\npath = \"/g\"\nguest = \"\"\n",
        3,
        &["empty", "wasm/echo.wasm"],
    );
}

// ---- paths ----

#[test]
fn path_missing_or_malformed() {
    refused(
        "[[route]]\nnative = \"echo\"\n",
        1,
        &["no path", r#"path = "/echo""#],
    );
    refused(
        "[[route]]\npath = \"echo\"\nnative = \"echo\"\n",
        2,
        &[r#"starts with "/""#, r#"write "/echo""#],
    );
    refused(
        "[[route]]\npath = \"/a?b=1\"\nnative = \"echo\"\n",
        2,
        &["'?' cannot appear", "queries are not matched"],
    );
}

#[test]
fn path_wildcards_and_parameters() {
    refused(
        "[[route]]\npath = \"/chat*\"\nnative = \"echo\"\n",
        2,
        &[
            "wildcard is only allowed as the last segment",
            r#""/chat/*""#,
        ],
    );
    refused(
        "[[route]]\npath = \"/a/*/b\"\nnative = \"echo\"\n",
        2,
        &["wildcard is only allowed as the last segment"],
    );
    refused(
        "[[route]]\npath = \"/rooms/{room\"\nnative = \"echo\"\n",
        2,
        &["a parameter is a name in braces", r#""/rooms/{room}""#],
    );
    refused(
        "[[route]]\npath = \"/rooms/{a}{b}\"\nnative = \"echo\"\n",
        2,
        &["only one parameter per segment"],
    );
}

#[test]
fn duplicate_path() {
    refused(
        &format!("{ECHO}\n[[route]]\npath = \"/echo\"\nnative = \"relay\"\n"),
        6,
        &[
            r#"path = "/echo": the same path is already routed on line 1"#,
            "remove one of the two routes",
        ],
    );
}

#[test]
fn overlapping_parameters() {
    refused(
        "[[route]]\npath = \"/rooms/{room}\"\nnative = \"echo\"\n\n\
         [[route]]\npath = \"/rooms/{id}\"\nnative = \"echo\"\n",
        6,
        &[
            r#"overlaps the route on line 1 ("/rooms/{room}")"#,
            "differ by a fixed segment",
        ],
    );
    refused(
        "[[route]]\npath = \"/chat/*\"\nnative = \"echo\"\n\
         [[route]]\npath = \"/chat/{*all}\"\nnative = \"echo\"\n",
        5,
        &[r#"overlaps the route on line 1 ("/chat/*")"#],
    );
}

// ---- file shape ----

#[test]
fn no_routes() {
    let err = Config::parse("[server]\nworkers = 1\n", Path::new(".")).unwrap_err();
    assert_eq!(err.line, None);
    assert!(err.message.contains("no routes"), "{err}");
    assert!(err.message.contains("[[route]]"), "{err}");
}

#[test]
fn single_bracket_route_and_double_bracket_server() {
    refused(
        "\n[route]\npath = \"/x\"\n",
        2,
        &["write [[route]] (two brackets)"],
    );
    refused(
        "[[server]]\nworkers = 1\n",
        1,
        &["write [server] (one bracket)"],
    );
}

#[test]
fn toml_syntax_errors() {
    refused(
        "[server]\nmax_message = 32MiB\n",
        2,
        &["text values need quotes", r#"write max_message = "32MiB""#],
    );
    refused(
        "[server]\nlisten =\n",
        2,
        &["has no value", r#"listen = "127.0.0.1:9001""#],
    );
    refused(
        "[server]\nworkers = 1\nworkers = 2\n",
        3,
        &["duplicate key", "once per table"],
    );
    refused("[server\n", 1, &["unclosed table"]);
}

// ---- load ----

#[test]
fn load_resolves_against_the_file_and_checks_guests() {
    let dir = std::env::temp_dir().join(format!("weir-config-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("wasm")).unwrap();
    let file = dir.join("routes.toml");
    std::fs::write(
        &file,
        format!("{ECHO}\n[[route]]\npath = \"/g\"\nguest = \"wasm/g.wasm\"\n"),
    )
    .unwrap();

    let err = Config::load(&file).unwrap_err();
    assert_eq!(err.line, Some(5));
    assert!(
        err.message
            .starts_with(&format!("{}: line 5: ", file.display())),
        "{err}"
    );
    assert!(err.message.contains("not found"), "{err}");
    assert!(err.message.contains("scripts/build-guests.sh"), "{err}");

    std::fs::write(dir.join("wasm/g.wasm"), b"\0asm").unwrap();
    let config = Config::load(&file).unwrap();
    assert_eq!(config.source.as_deref(), Some(file.as_path()));
    assert_eq!(
        only_guest(&Config {
            routes: config.routes[1..].to_vec(),
            ..config.clone()
        })
        .wasm,
        dir.join("wasm/g.wasm")
    );

    std::fs::write(&file, "[server]\nworkers = -1\n").unwrap();
    let err = Config::load(&file).unwrap_err();
    assert!(
        err.message
            .starts_with(&format!("{}: line 2: ", file.display())),
        "{err}"
    );

    let err = Config::load(&dir.join("missing.toml")).unwrap_err();
    assert_eq!(err.line, None);
    assert!(err.message.contains("cannot read"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- the documentation stays true ----

#[test]
fn readme_routes_example_parses() {
    let readme = include_str!("../../../README.md");
    let example = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README has a ```toml block");
    let config = parse(example);
    assert_eq!(config.routes.len(), 8);
    // The pusher route shows its app's keys at their defaults.
    let Behaviour::Native(NativeKind::Pusher(pusher)) = &config.routes[7].behaviour else {
        panic!("README's eighth route is a pusher route");
    };
    let app = &pusher.apps[0];
    assert_eq!(
        app.client_events_per_second,
        DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND
    );
    assert_eq!(
        app.max_channels_per_connection,
        DEFAULT_PUSHER_MAX_CHANNELS_PER_CONNECTION
    );
    assert_eq!(
        (app.max_presence_members, app.max_payload),
        (100, 10 * 1024)
    );
    assert_eq!(app.activity_timeout, Duration::from_secs(120));
    assert!(!app.client_events && !app.user_authentication && app.max_connections.is_none());
    assert_eq!(config.server.limits, Limits::default());
    assert_eq!(config.server.max_connections, DEFAULT_MAX_CONNECTIONS);
    // The pubsub route shows its keys at their defaults.
    assert_eq!(
        config.routes[2].behaviour,
        Behaviour::Native(NativeKind::PubSub(PubSubConfig::default()))
    );
    assert!(matches!(config.cluster, Some(ClusterConfig::Redis(_))));
    // The proxy route shows connect_timeout at its default.
    assert!(
        matches!(
            config.routes[3].behaviour,
            Behaviour::Native(NativeKind::Centrifugo(_))
        ),
        "README's fourth route is centrifugo"
    );
    assert!(config.api.is_some(), "README shows the [api] section");
    let Behaviour::Native(NativeKind::Proxy(proxy)) = &config.routes[4].behaviour else {
        panic!("README's fifth route is a proxy");
    };
    assert_eq!(proxy.connect_timeout, DEFAULT_PROXY_CONNECT_TIMEOUT);
    let Behaviour::Guest(chat) = &config.routes[5].behaviour else {
        panic!("README's sixth route is a guest");
    };
    // The README shows each guest key at its default.
    let mut defaults = GuestConfig::defaults(chat.wasm.clone());
    defaults
        .env
        .insert("WEIR_AUTH_TOKEN".into(), "let-me-in".into());
    assert_eq!(chat, &defaults);
}

#[test]
fn examples_routes_file_parses() {
    let text = include_str!("../../../examples/routes.toml");
    let config = Config::parse(text, Path::new("examples")).unwrap();
    let paths: Vec<&str> = config.routes.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/echo",
            "/relay",
            "/topic/{topic}",
            "/proxy/{room}",
            "/moderated/{room}",
            "/plain",
            "/json",
            "/binary",
            "/chat/{room}",
            "/shout/{room}",
            "/auth",
            "/counter",
            "/js/plain",
            "/js/json",
            "/js/chat/{room}",
            "/js/counter",
            "/js/ticker",
            "/js/remote-auth",
            "/py/plain",
            "/py/json",
            "/py/chat/{room}",
            "/py/counter",
            "/py/ticker",
            "/py/remote-auth",
            "/presence/{room}",
            "/ticker",
            "/remote-auth"
        ]
    );
    let Behaviour::Guest(auth) = &config.routes[10].behaviour else {
        panic!("/auth is a guest route");
    };
    assert_eq!(auth.wasm, Path::new("examples/wasm/auth.wasm"));
    assert_eq!(
        auth.env.get("WEIR_AUTH_TOKEN").map(String::as_str),
        Some("let-me-in")
    );
}

#[test]
fn prefix_route_needs_a_segment_after_the_prefix() {
    let config = parse("[[route]]\npath = \"/files/*\"\nnative = \"echo\"\n");
    let router = config.router();
    assert!(router.at("/files/a").is_ok());
    assert!(router.at("/files/a/b").is_ok());
    assert!(router.at("/files").is_err());
}

/// Topics are namespaced per route unless a route names a shared namespace.
#[test]
fn topic_namespaces() {
    let config = parse(&guest_route(""));
    assert_eq!(config.routes[0].topics, None);
    let config = parse(&guest_route("topics = \"rooms-1.v2\""));
    assert_eq!(config.routes[0].topics.as_deref(), Some("rooms-1.v2"));
    refused(
        &guest_route("topics = \"two words\""),
        4,
        &["topic namespace", "topics = \"chat\""],
    );
    refused(&guest_route("topics = \"\""), 4, &["topic namespace"]);
    refused(
        &format!("{ECHO}topics = \"rooms\"\n"),
        4,
        &["topics only applies to guest routes"],
    );
}

/// A guest route's log budget: level, lines and bytes per second, burst.
#[test]
fn guest_log_budget() {
    let config = parse(&guest_route(""));
    assert_eq!(only_guest(&config).log, GuestLog::default());
    let config = parse(&guest_route(
        "log = \"warn\"\nlog_rate = \"50/s\"\nlog_bytes = \"64KiB/s\"\nlog_burst = 10",
    ));
    let log = only_guest(&config).log;
    assert_eq!(log.level, LogLevel::Warn);
    assert_eq!(
        (log.lines_per_sec, log.bytes_per_sec, log.burst),
        (50, 64 << 10, 10)
    );
    refused(
        &guest_route("log = \"loud\""),
        4,
        &["unknown log level", "\"debug\""],
    );
    refused(
        &guest_route("log_rate = \"50\""),
        4,
        &["not a rate per second", "\"200/s\""],
    );
    refused(&guest_route("log_rate = \"0/s\""), 4, &["lines per second"]);
    refused(&guest_route("log_bytes = \"lots/s\""), 4, &["\"256KiB/s\""]);
    refused(&guest_route("log_burst = 0"), 4, &["log_burst"]);
    refused(
        &format!("{ECHO}log_rate = \"5/s\"\n"),
        4,
        &["log_rate only applies to guest routes"],
    );
}

/// The share of a core a slow route's guest thread may use.
#[test]
fn guest_cpu_share() {
    assert_eq!(only_guest(&parse(&guest_route(""))).cpu_share, 50);
    assert_eq!(
        only_guest(&parse(&guest_route("cpu_share = \"10%\""))).cpu_share,
        10
    );
    refused(&guest_route("cpu_share = \"0%\""), 4, &["from 1% to 100%"]);
    refused(&guest_route("cpu_share = \"half\""), 4, &["\"50%\""]);
    refused(
        &format!("{ECHO}cpu_share = \"10%\"\n"),
        4,
        &["cpu_share only applies to guest routes"],
    );
}

/// Browser origins allowed besides the gateway's own (cross-site WebSocket
/// hijacking): a list of `scheme://host[:port]`, or "*".
#[test]
fn origins() {
    let config = parse(&format!(
        "[server]\norigins = [\"https://app.example.com\"]\n{ECHO}origins = [\"*\"]\n"
    ));
    assert_eq!(
        config.server.limits.origins,
        vec!["https://app.example.com"]
    );
    assert_eq!(config.routes[0].limits.origins, vec!["*"]);
    refused(
        "[server]\norigins = [\"app.example.com\"]\n",
        2,
        &["not an origin", "https://app.example.com"],
    );
    refused(
        "[server]\norigins = [\"https://a.example/path\"]\n",
        2,
        &["not an origin"],
    );
    refused("[server]\norigins = \"*\"\n", 2, &["not a list"]);
    let config = parse(&format!(
        "[server]\nrequire_origin = true\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
         {ECHO}origins = [\"https://*.example.com\", \"null\"]\nrequire_origin = false\n"
    ));
    assert!(config.server.limits.require_origin);
    assert!(!config.routes[0].limits.require_origin);
    assert_eq!(config.server.trusted_proxies.len(), 2);
    assert_eq!(
        config.routes[0].limits.origins,
        vec!["https://*.example.com", "null"]
    );
    refused(
        &format!("{ECHO}origins = [\"https://a.*.example.com\"]\n"),
        4,
        &["wildcard may only be the first label"],
    );
    refused(
        &format!("{ECHO}origins = [\"https://*.com\"]\n"),
        4,
        &["subdomains of a domain with a dot"],
    );
    refused(
        "[server]\ntrusted_proxies = [\"10.0.0.0/40\"]\n",
        2,
        &["not an IP address or range"],
    );
}

const PUBSUB: &str = "[[route]]\npath = \"/topic/{topic}\"\nnative = \"pubsub\"\n";

/// A pubsub route's keys, their defaults, and their refusal elsewhere.
#[test]
fn pubsub_routes_and_their_keys() {
    let config = parse(PUBSUB);
    assert_eq!(
        config.routes[0].behaviour,
        Behaviour::Native(NativeKind::PubSub(PubSubConfig {
            echo_self: false,
            slow_subscriber: SlowSubscriber::Close,
            realtime: false,
        }))
    );
    let config = parse(&format!(
        "{PUBSUB}echo_self = true\nslow_subscriber = \"drop\"\ntopics = \"rooms\"\n"
    ));
    assert_eq!(
        config.routes[0].behaviour,
        Behaviour::Native(NativeKind::PubSub(PubSubConfig {
            echo_self: true,
            slow_subscriber: SlowSubscriber::Drop,
            realtime: false,
        }))
    );
    assert_eq!(config.routes[0].topics.as_deref(), Some("rooms"));
    refused(
        &format!("{PUBSUB}echo_self = \"yes\"\n"),
        4,
        &["echo_self = \"yes\"", "true"],
    );
    refused(
        &format!("{PUBSUB}slow_subscriber = \"wait\"\n"),
        4,
        &["\"close\"", "\"drop\""],
    );
    refused(
        &format!("{ECHO}echo_self = true\n"),
        4,
        &[
            "echo_self only applies to pubsub routes",
            "native = \"pubsub\"",
        ],
    );
    refused(
        &guest_route("slow_subscriber = \"drop\""),
        4,
        &["slow_subscriber only applies to pubsub routes"],
    );
    refused(
        &format!("{PUBSUB}memory = \"1MiB\"\n"),
        4,
        &["memory only applies to guest routes"],
    );
    refused(
        &format!("{ECHO}realtime = true\n"),
        4,
        &["realtime only applies to pubsub routes and guest routes"],
    );
}

/// `realtime = true` on a guest route (issue 37): allowed, off by default.
#[test]
fn realtime_guest_routes() {
    assert!(!only_guest(&parse(&guest_route(""))).realtime);
    assert!(only_guest(&parse(&guest_route("realtime = true"))).realtime);
    refused(&guest_route("realtime = 1"), 4, &["realtime = 1"]);
    refused(
        "[[route]]\npath = \"/t\"\nnative = \"pubsb\"\n",
        3,
        &["\"pubsub\""],
    );
}

/// `[cluster]`: one Redis or a Redis Cluster, never both or neither.
#[test]
fn cluster_section() {
    assert_eq!(parse(ECHO).cluster, None);
    let config = parse(&format!(
        "{ECHO}\n[cluster]\nredis = \"redis://127.0.0.1:6379\"\n"
    ));
    assert_eq!(
        config.cluster,
        Some(ClusterConfig::Redis("redis://127.0.0.1:6379".into()))
    );
    let config = parse(&format!(
        "{ECHO}\n[cluster]\nredis_cluster = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n"
    ));
    assert_eq!(
        config.cluster,
        Some(ClusterConfig::RedisCluster(vec![
            "redis://127.0.0.1:7000".into(),
            "redis://127.0.0.1:7001".into()
        ]))
    );
    refused(
        &format!("{ECHO}\n[cluster]\nredis = \"http://127.0.0.1:6379\"\n"),
        6,
        &["not a redis:// URL"],
    );
    refused(
        &format!("{ECHO}\n[cluster]\nredis_cluster = []\n"),
        6,
        &["name at least one node"],
    );
    refused(
        &format!("{ECHO}\n[cluster]\nredis = \"redis://a\"\nredis_cluster = [\"redis://b\"]\n"),
        6,
        &["not both"],
    );
    refused(&format!("{ECHO}\n[cluster]\n"), 5, &["names no Redis"]);
    // A password from the environment, never shown in a message.
    std::env::set_var("WEIR_TEST_REDIS_SECRET_13", "s3cret");
    let config = parse(&format!(
        "{ECHO}\n[cluster]\nredis = \"redis://:${{WEIR_TEST_REDIS_SECRET_13}}@127.0.0.1:6379\"\n"
    ));
    assert_eq!(
        config.cluster,
        Some(ClusterConfig::Redis(
            "redis://:s3cret@127.0.0.1:6379".into()
        ))
    );
    refused(
        &format!("{ECHO}\n[cluster]\nredis = \"redis://:${{WEIR_TEST_UNSET_13}}@h\"\n"),
        6,
        &["WEIR_TEST_UNSET_13, which is not set"],
    );
    refused(
        &format!("{ECHO}\n[cluster]\nredis_url = \"redis://a\"\n"),
        6,
        &["unknown key \"redis_url\" in [cluster]", "redis"],
    );
}

#[test]
fn admin_section_and_where_metrics_are_served() {
    let plain = parse(ECHO);
    assert_eq!(plain.admin, None, "the admin API is off by default");
    assert!(
        plain.server.public_metrics,
        "without [admin], /metrics stays public"
    );

    let with_admin = parse(&format!("[admin]\nlisten = \"127.0.0.1:9090\"\n\n{ECHO}"));
    assert_eq!(
        with_admin.admin,
        Some(AdminConfig {
            listen: "127.0.0.1:9090".parse().unwrap(),
            token_env: DEFAULT_ADMIN_TOKEN_ENV.into(),
            tls: None,
        })
    );
    assert!(
        !with_admin.server.public_metrics,
        "with [admin], /metrics moves there"
    );

    let both = parse(&format!(
        "[server]\npublic_metrics = true\n\n[admin]\nlisten = \"127.0.0.1:9090\"\ntoken_env = \"MY_TOKEN\"\n\n{ECHO}"
    ));
    assert!(both.server.public_metrics);
    assert_eq!(both.admin.unwrap().token_env, "MY_TOKEN");

    let tls = parse(&format!(
        "[admin]\nlisten = \"127.0.0.1:9090\"\ntls = {{ cert = \"c.pem\", key = \"/k.pem\" }}\n\n{ECHO}"
    ));
    let files = tls.admin.unwrap().tls.expect("[admin] tls");
    assert_eq!(files.cert, std::path::PathBuf::from("/etc/weir/c.pem"));
    assert_eq!(files.key, std::path::PathBuf::from("/k.pem"));
    assert_eq!(files.line, 3);
}

#[test]
fn admin_section_errors_name_their_line() {
    refused(
        &format!("[admin]\nlisten = \"localhost\"\n{ECHO}"),
        2,
        &["listen = \"localhost\"", "127.0.0.1:9090"],
    );
    refused(
        &format!("[admin]\nlisten = \"127.0.0.1:9090\"\ntoken_env = \"MY TOKEN\"\n{ECHO}"),
        3,
        &["not an environment variable name", "WEIR_ADMIN_TOKEN"],
    );
    refused(
        &format!("[admin]\ntoken_env = \"T\"\n{ECHO}"),
        1,
        &["[admin] needs listen"],
    );
    refused(
        &format!("[admin]\nlisten = \"127.0.0.1:9090\"\ntoken = \"secret\"\n{ECHO}"),
        3,
        &["unknown key \"token\" in [admin]", "token_env"],
    );
    refused(
        &format!("[admin]\nlisten = \"127.0.0.1:9090\"\ntls = {{ cert = \"c.pem\" }}\n{ECHO}"),
        3,
        &["`key` is missing", "tls = { cert ="],
    );
    refused(
        &format!("[server]\npublic_metrics = \"yes\"\n{ECHO}"),
        2,
        &["public_metrics = \"yes\"", "true or false"],
    );
}

/// permessage-deflate keys: per route, over the server's defaults, with
/// file:line errors for values that are not allowed.
#[test]
fn compression_keys() {
    use weir_ws::deflate::{Compression, Context};
    let text = r#"
[server]
compression = "on"

[[route]]
path = "/a"
native = "echo"

[[route]]
path = "/b"
native = "relay"
compression = "off"

[[route]]
path = "/c"
native = "echo"
compression_min = "1KiB"
compression_context = "none"
compression_level = 2
"#;
    let config = parse(text);
    let on = |min_bytes, context, level| Compression {
        enabled: true,
        min_bytes,
        context,
        level,
    };
    assert_eq!(
        config.routes[0].limits.compression,
        on(256, Context::Takeover, 1)
    );
    assert!(!config.routes[1].limits.compression.enabled);
    assert_eq!(
        config.routes[2].limits.compression,
        on(1024, Context::None, 2)
    );
    for (bad, line, needle) in [
        ("compression = \"yes\"", 4, "compression = \"on\""),
        ("compression_context = \"shared\"", 4, "\"takeover\""),
        ("compression_min = \"1MB\"", 4, "MiB"),
        ("compression_level = 0", 4, "from 1 to 9"),
    ] {
        let text = format!("[[route]]\npath = \"/x\"\nnative = \"echo\"\n{bad}\n");
        refused(&text, line, &[needle]);
    }
    // A proxy route never negotiates it: refused when asked for on the
    // route, off when [server] turns it on for every route.
    refused(
        &format!(
            "{}compression = \"on\"\n",
            proxy_route("upstream = \"ws://127.0.0.1:9/\"")
        ),
        5,
        &["not supported on proxy routes"],
    );
    let config = parse(&format!(
        "[server]\ncompression = \"on\"\n\n{}",
        proxy_route("upstream = \"ws://127.0.0.1:9/\"")
    ));
    assert!(!config.routes[0].limits.compression.enabled);
}

fn proxy_route(extra: &str) -> String {
    format!("[[route]]\npath = \"/rooms/{{room}}\"\nnative = \"proxy\"\n{extra}\n")
}

/// A proxy route: its upstream split into host, port and path template,
/// the defaults, and `forward_headers` lower-cased.
#[test]
fn proxy_routes() {
    let config = parse(&proxy_route(
        "upstream = \"ws://127.0.0.1:9100/rooms/{room}\"\nconnect_timeout = \"250ms\"\n\
         forward_headers = [\"Cookie\", \"authorization\"]",
    ));
    let Behaviour::Native(NativeKind::Proxy(proxy)) = &config.routes[0].behaviour else {
        panic!("a proxy route");
    };
    assert_eq!((proxy.host.as_str(), proxy.port), ("127.0.0.1", 9100));
    assert_eq!(proxy.authority, "127.0.0.1:9100");
    assert_eq!(proxy.path, "/rooms/{room}");
    assert_eq!(proxy.connect_timeout, Duration::from_millis(250));
    assert_eq!(proxy.forward_headers, ["cookie", "authorization"]);
    let config = parse(&proxy_route("upstream = \"ws://backend\""));
    let Behaviour::Native(NativeKind::Proxy(proxy)) = &config.routes[0].behaviour else {
        panic!("a proxy route");
    };
    assert_eq!((proxy.port, proxy.path.as_str()), (80, "/"));
    assert_eq!(proxy.connect_timeout, DEFAULT_PROXY_CONNECT_TIMEOUT);
    assert!(!proxy.tls && proxy.filter.is_none());
    // wss://: port 443 by default, a private CA beside the routes file,
    // and a filter with the route's guest keys as its limits.
    let config = parse(&proxy_route(
        "upstream = \"wss://backend/x\"\nupstream_ca = \"ca.pem\"\n\
         filter = \"wasm/moderate.wasm\"\ntimeout = \"50ms\"",
    ));
    let Behaviour::Native(NativeKind::Proxy(proxy)) = &config.routes[0].behaviour else {
        panic!("a proxy route");
    };
    assert_eq!((proxy.tls, proxy.port), (true, 443));
    assert!(proxy
        .upstream_ca
        .as_ref()
        .is_some_and(|p| p.ends_with("ca.pem")));
    let filter = proxy.filter.as_ref().expect("a filter");
    assert!(filter.wasm.ends_with("wasm/moderate.wasm"));
    assert_eq!(filter.timeout, Duration::from_millis(50));
}

/// Every proxy mistake names its line and what to write.
#[test]
fn proxy_mistakes() {
    refused(
        &proxy_route(""),
        3,
        &["needs its upstream", "upstream = \"ws://"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nupstream_ca = \"ca.pem\""),
        5,
        &["upstream_ca is for wss:// upstreams"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nmemory = \"16MiB\""),
        5,
        &["memory only applies to guest routes"],
    );
    refused(
        &proxy_route("upstream = \"http://h/\""),
        4,
        &["ws:// or wss:// URL"],
    );
    refused(
        &proxy_route("upstream = \"ws://h:99999/\""),
        4,
        &["host:port"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/{user}\""),
        4,
        &["{user} is not a parameter", "{room}"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nconnect_timeout = 5"),
        5,
        &["needs a unit", "\"5s\""],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nforward_headers = [\"x-forwarded-for\"]"),
        5,
        &["written by weir itself"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nforward_headers = [\"bad header\"]"),
        5,
        &["not a header name"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nsubprotocols = [\"a\"]"),
        5,
        &["the upstream chose; remove subprotocols"],
    );
    refused(
        &format!("{ECHO}upstream = \"ws://h/\"\n"),
        4,
        &["upstream only applies to proxy routes"],
    );
    refused(
        &proxy_route("upstream = \"ws://h/\"\nmemory = \"1MiB\""),
        5,
        &["memory only applies to guest routes"],
    );
}

#[test]
fn guest_io_policy_reads_and_defaults_to_deny() {
    let text = guest_route(
        "allow_outbound = [\"http://127.0.0.1:8080\", \"HTTP://Api.Internal/v1/\", \
         \"https://auth.example.com\"]\n\
         outbound_timeout = \"2s\"\noutbound_max_concurrent = 8\n\
         outbound_max_response = \"64KiB\"\noutbound_ca = \"certs/ca.pem\"\n\
         allow_private = true\nkv = \"shared:rooms\"",
    );
    let config = Config::parse(&text, Path::new("/etc/weir")).unwrap();
    let Behaviour::Guest(g) = &config.routes[0].behaviour else {
        panic!("a guest route")
    };
    let prefix = |host: &str, port, path: &str| OutboundPrefix {
        scheme: if port == 443 { "https" } else { "http" }.into(),
        host: host.into(),
        port,
        path: path.into(),
    };
    assert_eq!(
        *g.outbound,
        OutboundPolicy {
            allow: vec![
                prefix("127.0.0.1", 8080, "/"),
                prefix("api.internal", 80, "/v1/"),
                prefix("auth.example.com", 443, "/"),
            ],
            timeout: Duration::from_secs(2),
            max_concurrent: 8,
            max_response: 64 << 10,
            ca: Some(PathBuf::from("/etc/weir/certs/ca.pem")),
            allow_private: true,
        }
    );
    assert_eq!(g.kv, Some(KvName::Shared("rooms".into())));
    let plain = Config::parse(&guest_route("kv = \"route\""), Path::new("/etc/weir")).unwrap();
    let Behaviour::Guest(g) = &plain.routes[0].behaviour else {
        panic!("a guest route")
    };
    assert!(g.outbound.allow.is_empty(), "deny by default");
    assert_eq!(g.kv, Some(KvName::Route));
}

#[test]
fn guest_io_policy_errors_name_their_line() {
    refused(
        &guest_route("allow_outbound = [\"ftp://files.example.com\"]"),
        4,
        &["allow_outbound", "the scheme must be http or https"],
    );
    refused(
        &guest_route("allow_outbound = [\"http://a/\"]\noutbound_ca = \"ca.pem\""),
        5,
        &["outbound_ca is for https:// requests"],
    );
    refused(
        &guest_route("allow_outbound = [\"https://a/\"]\noutbound_ca = \"\""),
        5,
        &["outbound_ca", "empty"],
    );
    refused(
        &guest_route("allow_outbound = [\"127.0.0.1:8080\"]"),
        4,
        &["not a URL prefix", "no scheme"],
    );
    refused(
        &guest_route("allow_outbound = \"http://a\""),
        4,
        &["not a list of URL prefixes"],
    );
    refused(
        &guest_route("allow_outbound = [\"http://a:port/\"]"),
        4,
        &["the port is not a number"],
    );
    refused(
        &guest_route("allow_outbound = [\"http://a/v1/../admin\"]"),
        4,
        &["not a URL prefix", "without dot segments"],
    );
    refused(
        &guest_route("allow_outbound = [\"http://a/v1%2fadmin\"]"),
        4,
        &["not a URL prefix", "no single reading"],
    );
    refused(
        &guest_route("allow_private = true"),
        4,
        &["allow_private", "allow_outbound lists none"],
    );
    refused(
        &guest_route("allow_outbound = [\"http://a/\"]\nallow_private = \"yes\""),
        5,
        &["allow_private", "not true or false"],
    );
    refused(
        &guest_route("outbound_max_concurrent = 0"),
        4,
        &["outbound_max_concurrent"],
    );
    refused(
        &guest_route("kv = \"everywhere\""),
        4,
        &["\"route\"", "shared:NAME"],
    );
    refused(&guest_route("kv = \"shared:a/b\""), 4, &["not a store"]);
    refused(
        &format!("{ECHO}kv = \"route\"\n"),
        4,
        &["kv only applies to guest routes"],
    );
}

/// Issue 35: a store's quota, in sizes and counts like the other keys;
/// refused without a store, out of range, and when two routes give one
/// shared store different quotas.
#[test]
fn kv_quota_keys_are_parsed_and_refused_without_kv() {
    let config = Config::parse(
        &guest_route("kv = \"route\"\nkv_max_bytes = \"1MiB\"\nkv_max_keys = 500"),
        Path::new("/etc/weir"),
    )
    .unwrap();
    assert_eq!(
        only_guest(&config).kv_quota,
        KvQuota {
            max_bytes: 1 << 20,
            max_keys: 500
        }
    );
    let plain = Config::parse(&guest_route("kv = \"route\""), Path::new("/etc/weir")).unwrap();
    assert_eq!(only_guest(&plain).kv_quota, KvQuota::default());
    assert_eq!(
        (DEFAULT_KV_MAX_BYTES, DEFAULT_KV_MAX_KEYS),
        (64 << 20, 100_000)
    );
    refused(
        &guest_route("kv_max_keys = 10"),
        4,
        &["kv_max_keys", "add kv = \"route\""],
    );
    refused(
        &guest_route("kv = \"route\"\nkv_max_bytes = \"64MB\""),
        5,
        &["64MiB"],
    );
    refused(
        &guest_route("kv = \"route\"\nkv_max_keys = 0"),
        5,
        &["kv_max_keys"],
    );
    refused(
        &format!("{ECHO}kv_max_bytes = \"1MiB\"\n"),
        4,
        &["kv_max_bytes only applies to guest routes"],
    );
    let two = "[[route]]\npath = \"/a\"\nguest = \"g.wasm\"\nkv = \"shared:s\"\n\
               [[route]]\npath = \"/b\"\nguest = \"g.wasm\"\nkv = \"shared:s\"\nkv_max_keys = 7\n";
    refused(two, 8, &["shared:s", "another quota on line"]);
}

/// `[server] tls`: two PEM paths, relative to the routes file; anything
/// else is refused on its line with an example.
#[test]
fn tls_takes_a_cert_and_a_key_relative_to_the_file() {
    let config = parse(&format!(
        "[server]\ntls = {{ cert = \"certs/full.pem\", key = \"/abs/key.pem\" }}\n{ECHO}"
    ));
    let tls = config.server.tls.expect("tls set");
    assert_eq!(tls.cert, Path::new("/etc/weir/certs/full.pem"));
    assert_eq!(tls.key, Path::new("/abs/key.pem"));
    assert_eq!(tls.line, 2);
    assert!(parse(ECHO).server.tls.is_none());
    refused(
        &format!("[server]\nlisten = \"127.0.0.1:1\"\ntls = \"cert.pem\"\n{ECHO}"),
        3,
        &["not a table", "tls = { cert = "],
    );
    refused(
        &format!("[server]\ntls = {{ cert = \"c.pem\" }}\n{ECHO}"),
        2,
        &["`key` is missing"],
    );
    refused(
        &format!("[server]\ntls = {{ cert = \"c.pem\", key = \"k.pem\", ca = \"x\" }}\n{ECHO}"),
        2,
        &["unknown key `ca`"],
    );
    refused(
        &format!("[server]\ntls = {{ cert = 1, key = \"k.pem\" }}\n{ECHO}"),
        2,
        &["`cert` is not a file path"],
    );
}

/// Issue 35: `allowed_hosts` and `h2_max_streams`, with their errors on
/// their lines.
#[test]
fn allowed_hosts_and_h2_max_streams() {
    let config = parse(&format!(
        "[server]\nallowed_hosts = [\"GW.example.com\", \"*.example.org\", \"[::1]\"]\nh2_max_streams = 8\n\n{ECHO}"
    ));
    assert_eq!(
        config.server.allowed_hosts.as_deref(),
        Some(
            &[
                "gw.example.com".to_string(),
                "*.example.org".into(),
                "[::1]".into()
            ][..]
        )
    );
    assert_eq!(config.server.h2_max_streams, 8);
    let config = parse(ECHO);
    assert_eq!(config.server.allowed_hosts, None);
    assert_eq!(config.server.h2_max_streams, DEFAULT_H2_MAX_STREAMS);
    refused(
        &format!("[server]\nworkers = 1\nallowed_hosts = [\"gw.example.com:443\"]\n{ECHO}"),
        3,
        &["gw.example.com:443", "without a port"],
    );
    refused(
        &format!("[server]\nallowed_hosts = [\"https://gw.example.com\"]\n{ECHO}"),
        2,
        &["https://gw.example.com", "no scheme"],
    );
    refused(
        &format!("[server]\nallowed_hosts = [\"*.com\"]\n{ECHO}"),
        2,
        &["*.com", "wildcard"],
    );
    refused(
        &format!("[server]\nallowed_hosts = \"gw.example.com\"\n{ECHO}"),
        2,
        &["not a list of host names"],
    );
    refused(
        &format!("[server]\nh2_max_streams = 0\n{ECHO}"),
        2,
        &["h2_max_streams"],
    );
    refused(
        &format!("[server]\nh2_max_streams = 100000\n{ECHO}"),
        2,
        &["h2_max_streams"],
    );
    refused(
        &format!("[server]\nh2_max_stream = 10\n{ECHO}"),
        2,
        &["did you mean h2_max_streams"],
    );
}

const PUSHER_APP: &str = "[[route.apps]]\nid = \"1\"\nkey = \"k1\"\nsecret_env = \"S1\"\n";

#[test]
fn pusher_routes_take_apps_with_defaults() {
    let text = format!(
        "[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}\
         [[route.apps]]\nid = \"2\"\nkey = \"k2\"\nsecret_env = \"S2\"\nclient_events = true\n\
         user_authentication = true\nmax_connections = 5\nclient_events_per_second = 3\n\
         max_presence_members = 7\nmax_channels_per_connection = 9\nmax_payload = \"1KiB\"\n\
         activity_timeout = \"30s\"\n"
    );
    let config = parse(&text);
    let Behaviour::Native(NativeKind::Pusher(pusher)) = &config.routes[0].behaviour else {
        panic!("a pusher route");
    };
    let (a, b) = (&pusher.apps[0], &pusher.apps[1]);
    assert_eq!(
        (a.id.as_str(), a.key.as_str(), a.secret_env.as_str()),
        ("1", "k1", "S1")
    );
    assert_eq!(a.line, 4);
    assert!(!a.client_events && !a.user_authentication);
    assert_eq!(a.max_connections, None);
    assert_eq!(
        a.client_events_per_second,
        DEFAULT_PUSHER_CLIENT_EVENTS_PER_SECOND
    );
    assert_eq!(a.max_presence_members, 100);
    assert_eq!(a.max_payload, 10 * 1024);
    assert_eq!(a.activity_timeout, Duration::from_secs(120));
    assert!(b.client_events && b.user_authentication);
    assert_eq!(b.max_connections, Some(5));
    assert_eq!(b.client_events_per_second, 3);
    assert_eq!(b.max_presence_members, 7);
    assert_eq!(b.max_channels_per_connection, 9);
    assert_eq!(b.max_payload, 1024);
    assert_eq!(b.activity_timeout, Duration::from_secs(30));
    // A prefix before /app/{key} is fine.
    parse(&format!(
        "[[route]]\npath = \"/ws/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}"
    ));
}

#[test]
fn pusher_routes_refuse_bad_shapes_with_their_line() {
    refused(
        &format!("[[route]]\npath = \"/pusher\"\nnative = \"pusher\"\n{PUSHER_APP}"),
        3,
        &["/app/{key}"],
    );
    refused(
        "[[route]]\npath = \"/app/{key}\"\nnative = \"pusher\"\n",
        3,
        &["at least one app", "[[route.apps]]"],
    );
    refused(
        &format!(
            "[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\ntopics = \"t\"\n{PUSHER_APP}"
        ),
        4,
        &["remove topics"],
    );
    refused(
        "[[route]]\npath = \"/app/{key}\"\nnative = \"pusher\"\n[[route.apps]]\nid = \"1\"\nkey = \"k\"\n",
        4,
        &["no secret_env"],
    );
    refused(
        "[[route]]\npath = \"/app/{key}\"\nnative = \"pusher\"\n[[route.apps]]\nid = \"1\"\nkey = \"k\"\nsecret_env = \"my secret\"\n",
        7,
        &["not an environment variable name"],
    );
    refused(
        &format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}[[route.apps]]\nid = \"1\"\nkey = \"k2\"\nsecret_env = \"S\"\n"),
        9,
        &["id = \"1\"", "another app"],
    );
    refused(
        &format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}[[route.apps]]\nid = \"2\"\nkey = \"k1\"\nsecret_env = \"S\"\n"),
        10,
        &["key = \"k1\"", "another app"],
    );
    refused(
        &format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}activity_timeout = \"1500ms\"\n"),
        8,
        &["whole seconds"],
    );
    refused(
        &format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}client_event = true\n"),
        8,
        &["client_event", "[[route.apps]]", "client_events"],
    );
    refused(
        &format!("[[route]]\npath = \"/e\"\nnative = \"echo\"\n{PUSHER_APP}"),
        5,
        &["only applies to pusher routes"],
    );
}

#[test]
fn pusher_apps_take_webhooks() {
    let text = format!(
        "[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}\
         [[route.apps.webhooks]]\nurl = \"http://127.0.0.1:9000/hooks?t=1\"\n\
         events = [\"channel_vacated\", \"channel_occupied\"]\n\
         [[route.apps.webhooks]]\nurl = \"https://app.example.com/h\"\nevents = [\"client_event\"]\n\
         timeout = \"2s\"\nmax_queue = \"64KiB\"\n"
    );
    let config = parse(&text);
    let Behaviour::Native(NativeKind::Pusher(pusher)) = &config.routes[0].behaviour else {
        panic!("a pusher route");
    };
    let hooks = &pusher.apps[0].webhooks;
    assert_eq!(hooks.len(), 2);
    assert_eq!(hooks[0].url, "http://127.0.0.1:9000/hooks?t=1");
    use weir_pusher::webhook::WebhookKind;
    assert_eq!(
        hooks[0].events,
        [WebhookKind::ChannelVacated, WebhookKind::ChannelOccupied]
    );
    assert_eq!(
        (hooks[0].timeout, hooks[0].max_queue),
        (DEFAULT_WEBHOOK_TIMEOUT, DEFAULT_WEBHOOK_MAX_QUEUE_BYTES)
    );
    assert!(hooks[1].wants(WebhookKind::ClientEvent));
    assert!(!hooks[1].wants(WebhookKind::CacheMiss));
    assert_eq!(
        (hooks[1].timeout, hooks[1].max_queue),
        (Duration::from_secs(2), 64 << 10)
    );
}

#[test]
fn pusher_webhooks_refuse_bad_urls_and_event_names_with_their_line() {
    let app = format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}");
    let hook = |body: &str| format!("{app}[[route.apps.webhooks]]\n{body}");
    let events = "events = [\"channel_occupied\"]\n";
    refused(
        &hook(&format!("url = \"ftp://a/h\"\n{events}")),
        9,
        &["http or https"],
    );
    refused(
        &hook(&format!("url = \"/hooks\"\n{events}")),
        9,
        &["http or https"],
    );
    refused(&hook(&format!("url = 7\n{events}")), 9, &["not a string"]);
    refused(
        &hook(&format!("url = \"not a url\"\n{events}")),
        9,
        &["not a URL"],
    );
    refused(
        &hook(&format!("url = \"http://u:p@a/h\"\n{events}")),
        9,
        &["user information"],
    );
    refused(
        &hook("url = \"http://a/h\"\nevents = [\"channel_occupied\", \"member_joined\"]\n"),
        10,
        &[
            "\"member_joined\" is not a webhook event",
            "\"member_added\"",
        ],
    );
    refused(&hook("url = \"http://a/h\"\nevents = []\n"), 10, &["empty"]);
    refused(&hook("url = \"http://a/h\"\n"), 8, &["no events"]);
    refused(&hook(events), 8, &["no url"]);
    refused(
        &hook(&format!("url = \"http://a/h\"\n{events}secret = \"x\"\n")),
        11,
        &["\"secret\" in [[route.apps.webhooks]]", "max_queue"],
    );
}

/// An app's guest: its component relative to the file, its limits; a
/// limit without a guest is refused at its line.
#[test]
fn pusher_apps_take_a_guest_with_its_limits() {
    let text = format!(
        "[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}\
         guest = \"hooks/gate.wasm\"\ntimeout = \"250ms\"\nmemory = \"32MiB\"\ninstances = 3\n\
         [[route.apps]]\nid = \"2\"\nkey = \"k2\"\nsecret_env = \"S2\"\n"
    );
    let config = parse(&text);
    let Behaviour::Native(NativeKind::Pusher(pusher)) = &config.routes[0].behaviour else {
        panic!("a pusher route");
    };
    let guest = pusher.apps[0].guest.as_ref().expect("app 1's guest");
    assert!(guest.wasm.ends_with("hooks/gate.wasm"));
    assert_eq!(guest.timeout, Duration::from_millis(250));
    assert_eq!(guest.memory, 32 << 20);
    assert_eq!(guest.instances, 3);
    assert!(pusher.apps[1].guest.is_none());
    refused(
        &format!("[[route]]\npath = \"/app/{{key}}\"\nnative = \"pusher\"\n{PUSHER_APP}timeout = \"1s\"\n"),
        8,
        &["a guest's limit without a guest"],
    );
}

/// Overload controls: `[server]` gives defaults, a route overrides one
/// key and keeps the others; the global cap is `[server]`'s only.
#[test]
fn rate_limits_default_from_the_server_and_override_per_route() {
    let config = parse(
        r#"
[server]
max_upgrade_rate = 500
max_upgrade_rate_per_ip = 5
max_message_rate = 100
max_byte_rate = "64KiB"

[[route]]
path = "/echo"
native = "echo"
rate_exceeded = "close"
max_message_rate = 10

[[route]]
path = "/free"
native = "echo"
max_upgrade_rate_per_ip = 0
"#,
    );
    assert_eq!(config.server.max_upgrade_rate, 500);
    let echo = config.routes[0].limits.rates;
    assert_eq!(
        echo,
        Rates {
            upgrades_per_ip: 5,
            messages: 10,
            bytes: 64 << 10,
            exceeded: RateExceeded::Close,
        }
    );
    let free = config.routes[1].limits.rates;
    assert_eq!(free.upgrades_per_ip, 0);
    assert_eq!(free.messages, 100);
    assert_eq!(free.exceeded, RateExceeded::Drop);
    assert!(free.limits_messages());
    assert!(!Rates::default().limits_messages());
}

#[test]
fn rate_limit_values_are_checked() {
    let e = refused(
        "[[route]]\npath = \"/e\"\nnative = \"echo\"\nrate_exceeded = \"kick\"\n",
        4,
        &["rate_exceeded = \"drop\"", "1008"],
    );
    assert!(e.message.contains("line 4"), "{}", e.message);
    refused(
        "[[route]]\npath = \"/e\"\nnative = \"echo\"\nmax_message_rate = -1\n",
        4,
        &["whole number"],
    );
    refused(
        "[[route]]\npath = \"/e\"\nnative = \"echo\"\nmax_byte_rate = \"1MB\"\n",
        4,
        &["MiB"],
    );
    refused(
        "[[route]]\npath = \"/e\"\nnative = \"echo\"\nmax_upgrade_rate = 5\n",
        4,
        &[
            "unknown key \"max_upgrade_rate\"",
            "max_upgrade_rate_per_ip",
        ],
    );
}

#[test]
fn oci_guests_keep_their_reference_and_bad_ones_name_their_line() {
    let hex = "ab".repeat(32);
    let text = format!(
        "[server]\noci_cache = \"oci-cache\"\n\n[[route]]\npath = \"/g\"\nguest = \"oci://127.0.0.1:5000/weir/echo@sha256:{hex}\"\n\n\
         [[route]]\npath = \"/t\"\nguest = \"oci://ghcr.io/me/chat:1.2\"\n"
    );
    let config = parse(&text);
    assert_eq!(
        config.server.oci_cache,
        Some(PathBuf::from("/etc/weir/oci-cache"))
    );
    let Behaviour::Guest(g) = &config.routes[0].behaviour else {
        panic!("a guest route")
    };
    let oci = g.oci.as_ref().expect("an oci reference");
    assert_eq!(oci.registry, "127.0.0.1:5000");
    assert_eq!(oci.repository, "weir/echo");
    assert_eq!(oci.digest, Some(format!("sha256:{hex}")));
    assert_eq!(g.wasm, PathBuf::new(), "set once pulled, not a file");
    let Behaviour::Guest(t) = &config.routes[1].behaviour else {
        panic!("a guest route")
    };
    assert_eq!(t.oci.as_ref().unwrap().tag.as_deref(), Some("1.2"));
    refused(
        "[[route]]\npath = \"/g\"\nguest = \"oci://ghcr.io/me/chat\"\n",
        3,
        &[
            "oci://ghcr.io/me/chat",
            "neither a tag nor a digest",
            "@sha256:",
        ],
    );
    refused(
        "[[route]]\npath = \"/g\"\nguest = \"oci://ghcr.io/me/chat@sha256:12\"\n",
        3,
        &["64 lower-case hex digits"],
    );
}
