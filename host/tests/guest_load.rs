//! Loading guest routes: clear errors for files that are not a weir handler
//! component (missing, not wasm, core module, wrong world, bad limits), via
//! `Program::load` and `check_routes`, and the on-disk artifact cache.

mod guest_support;

use std::path::{Path, PathBuf};

use guest_support::*;
use weir::guest::{check_routes, GuestEngine, GuestError, Program};
use weir_config::{Behaviour, Config, GuestConfig};

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-guest-load");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn load(path: &Path) -> Result<(), GuestError> {
    let mut cfg = config("echo");
    cfg.wasm = path.to_path_buf();
    Program::load(&engine(), "/r", &cfg).map(|_| ())
}

#[test]
fn missing_file_says_how_to_build() {
    let err = load(Path::new("/nonexistent/nothing.wasm")).unwrap_err();
    assert!(matches!(err, GuestError::Unreadable { .. }), "{err:?}");
    assert!(err.to_string().contains("scripts/build-guests.sh"), "{err}");
}

#[test]
fn garbage_is_not_wasm() {
    let err = load(&scratch("garbage.wasm", b"#!/bin/sh\necho hi\n")).unwrap_err();
    assert!(matches!(err, GuestError::NotWasm { .. }), "{err:?}");
}

#[test]
fn core_module_is_not_a_component() {
    // The smallest valid core module: magic + version 1.
    let err = load(&scratch("core.wasm", b"\0asm\x01\0\0\0")).unwrap_err();
    assert!(matches!(err, GuestError::CoreModule { .. }), "{err:?}");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
}

#[test]
fn component_with_the_wrong_world_names_the_export() {
    let err = load(&wasm("wrong-world")).unwrap_err();
    assert!(matches!(err, GuestError::Abi { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("weir:gateway/handler@0.2.0"), "{msg}");
    // Names what is wrong (the missing `upgrade` or mismatched `handle`).
    assert!(msg.contains("upgrade") || msg.contains("handle"), "{msg}");
}

#[test]
fn memory_limit_outside_the_pool_is_refused() {
    let mut cfg = config("echo");
    cfg.memory = 8 << 30;
    let err = Program::load(&engine(), "/r", &cfg)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, GuestError::Limits { .. }), "{err:?}");
}

#[test]
fn memory_limit_below_what_the_guest_starts_with_is_refused() {
    // Guests start with 2 pages (128 KiB) with the 64 KiB stack + data.
    let mut cfg = config("json");
    cfg.memory = 64 << 10;
    let err = Program::load(&engine(), "/r", &cfg)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, GuestError::Limits { .. }), "{err:?}");
    assert!(err.to_string().contains("memory"), "{err}");
}

fn guest_route(path: &str, cfg: GuestConfig) -> weir_config::RouteConfig {
    weir_config::RouteConfig {
        path: path.into(),
        line: 1,
        behaviour: Behaviour::Guest(cfg),
        limits: Default::default(),
        topics: None,
    }
}

#[test]
fn check_routes_reports_every_bad_route() {
    let mut config = Config::builtin_default();
    config
        .routes
        .push(guest_route("/ok", guest_support::config("echo")));
    assert!(check_routes(&config).is_ok());

    let mut core = guest_support::config("echo");
    core.wasm = scratch("core2.wasm", b"\0asm\x01\0\0\0");
    let mut wrong = guest_support::config("echo");
    wrong.wasm = wasm("wrong-world");
    config.routes.push(guest_route("/core", core));
    config.routes.push(guest_route("/wrong", wrong));
    match check_routes(&config).unwrap_err() {
        GuestError::Many(errors) => {
            assert_eq!(errors.len(), 2);
            assert!(errors[0].to_string().contains("/core"));
            assert!(errors[1].to_string().contains("/wrong"));
        }
        other => panic!("expected both routes reported, got {other}"),
    }
}

#[test]
fn compiled_components_are_cached_by_content_hash() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-guest-cache-test");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = GuestEngine::new(Some(dir.clone())).unwrap();
    let cfg = guest_support::config("echo");
    Program::load(&engine, "/echo", &cfg).unwrap();
    // Beside the artifacts: `functions/`, Cranelift's compiled functions.
    let artifacts: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("functions"))
        .collect();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    assert_eq!(artifacts[0].extension().unwrap(), "cwasm");
    let written = std::fs::metadata(&artifacts[0])
        .unwrap()
        .modified()
        .unwrap();
    // A second load reuses the artifact rather than rewriting it.
    Program::load(&engine, "/echo2", &cfg).unwrap();
    assert_eq!(
        std::fs::metadata(&artifacts[0])
            .unwrap()
            .modified()
            .unwrap(),
        written
    );
    // A corrupt artifact is replaced, not fatal.
    std::fs::write(&artifacts[0], b"junk").unwrap();
    Program::load(&engine, "/echo3", &cfg).unwrap();
    assert!(std::fs::metadata(&artifacts[0]).unwrap().len() > 1000);
}

#[test]
fn instances_above_the_pool_are_capped_and_zero_is_refused() {
    let mut cfg = guest_support::config("echo");
    cfg.instances = 1_000_000;
    let program = Program::load(&engine(), "/many", &cfg).unwrap();
    assert_eq!(
        program.max_instances(),
        weir::guest::POOL_COMPONENT_INSTANCES as usize
    );
    cfg.instances = 0;
    let err = Program::load(&engine(), "/none", &cfg)
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, GuestError::Limits { .. }), "{err:?}");
}

#[test]
fn guests_are_built_with_the_small_stack() {
    // scripts/build-guests.sh links with -zstack-size=65536: the guest
    // starts in 128 KiB, so a 256 KiB route fits. With the target's default
    // 1 MiB stack it would need 1088 KiB and fail to start.
    for name in ["echo", "counter", "faulty"] {
        let mut cfg = guest_support::config(name);
        cfg.memory = 256 << 10;
        let program = Program::load(&engine(), "/small", &cfg)
            .unwrap_or_else(|e| panic!("{name} needs more than 256 KiB to start: {e}"));
        let mut runner = weir::guest::Runner::new(program);
        let expected = if name == "counter" { "1" } else { "x" };
        assert_eq!(
            send_text(&mut runner, 1, "x").unwrap(),
            vec![Owned::Text(1, expected.into())]
        );
    }
}
