//! The fleet's view (`GET /fleet`, `weir routes --cluster`, the
//! dashboard): each route's desired version beside what each live node
//! reports, and whether they agree.

use super::store::StoreError;
use super::Fleet;

impl Fleet {
    /// The fleet's view: each route's desired version and what each live
    /// node serves, with whether they agree (`GET /fleet`).
    pub fn view(&self) -> Result<serde_json::Value, StoreError> {
        use serde_json::json;
        let desired = self.store.desired_all()?;
        let reports = self.store.reports()?;
        let routes: Vec<_> = desired
            .iter()
            .map(|d| {
                let nodes: Vec<_> = reports
                    .iter()
                    .map(|n| {
                        let r = n.routes.iter().find(|r| r.route == d.route);
                        let serves = r.is_some_and(|r| {
                            r.digest == d.digest && r.fleet_version == Some(d.version)
                        });
                        let refused = r.and_then(|r| r.refused.clone());
                        let state = match (serves, &refused, r) {
                            (true, _, _) => "serving".to_string(),
                            (false, Some((v, why)), _) if *v == d.version => {
                                format!("diverged: refused version {v}: {why}")
                            }
                            (false, _, None) => "diverged: no such route on this node".into(),
                            (false, _, Some(_)) => "converging".into(),
                        };
                        json!({
                            "node": n.node,
                            "fleet_version": r.and_then(|r| r.fleet_version),
                            "version": r.map(|r| r.local_version),
                            "hash": r.map(|r| r.digest.clone()),
                            "agrees": serves,
                            "state": state,
                            "reported_at": n.at,
                        })
                    })
                    .collect();
                let agrees = nodes.iter().all(|n| n["agrees"] == true);
                json!({
                    "route": d.route,
                    "desired": d,
                    "agrees": agrees,
                    "nodes": nodes,
                })
            })
            .collect();
        Ok(json!({
            "node": self.node,
            "nodes": reports.iter().map(|n| &n.node).collect::<Vec<_>>(),
            "routes": routes,
        }))
    }
}
