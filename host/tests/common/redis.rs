//! redis-server children for the tests across nodes (cluster.rs,
//! pusher_cluster.rs): a standalone server or a three-master Redis Cluster
//! on free loopback ports, each in a directory of its own, killed when
//! dropped. Debian's redis-server (scripts/redis.sh installs it).

use super::STEP;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One redis-server child on a loopback port, in a directory of its own.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// redis-server is installed (else the test says why it did nothing).
pub fn have_redis() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!(
            "\n*** SKIPPED: redis-server not found; run scripts/redis.sh (scripts/test.sh does) ***\n"
        );
    }
    found
}

impl Redis {
    pub async fn start(cluster: bool) -> Redis {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("weir-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Redis {
            port,
            dir,
            cluster,
            child: None,
        };
        redis.spawn().await;
        redis
    }

    pub async fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if self.cluster {
            cmd.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", "1000"]);
        }
        self.child = Some(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = tokio::time::Instant::now() + STEP;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server did not listen"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters joined into a Redis Cluster (no replicas).
pub async fn redis_cluster() -> Vec<Redis> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Redis::start(true).await);
    }
    let status = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "redis-cli --cluster create failed");
    await_cluster_ok(&nodes).await;
    nodes
}

/// Every node reports cluster_state:ok.
pub async fn await_cluster_ok(nodes: &[Redis]) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let ok = nodes.iter().all(|n| {
            Command::new("redis-cli")
                .args(["-p", &n.port.to_string(), "cluster", "info"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
        });
        if ok {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Redis Cluster did not form"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
