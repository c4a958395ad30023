//! `#[circuit_breaker(name = "…", key = …)]`: a breaker per key (a host, a
//! tenant) from a family sharing the attribute's configuration, expanded
//! for real, on tokio's paused clock.

mod macros_common;

use std::time::Duration;

use macros_common::{ClientError, Script};
use resilience::breaker::{BreakerFamily, State};
use resilience::{circuit_breaker, registry, retry};

fn family(name: &str) -> &'static BreakerFamily {
    registry::global()
        .families()
        .into_iter()
        .find(|family| family.name() == name)
        .unwrap_or_else(|| panic!("no breaker family named {name}"))
}

fn is_down(result: &Result<(), ClientError>, name: &str) -> bool {
    matches!(
        result,
        Err(ClientError::Resilience(resilience::Error::DependencyDown(down))) if down.breaker() == name
    )
}

#[circuit_breaker(name = "hosts", key = host, min = 2, ratio = 0.5, cooldown = "10s")]
async fn fetch(host: &str, script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn a_failing_host_opens_its_own_breaker_and_the_others_keep_serving() {
    let eu = Script::new(&[503, 503]);
    for _ in 0..2 {
        assert_eq!(
            fetch("eu.example", &eu).await,
            Err(ClientError::Status(503))
        );
    }
    let hosts = family("hosts");
    assert_eq!(
        hosts.find("eu.example").map(|b| b.state()),
        Some(State::Open)
    );

    // The open host is refused without running the body, under the
    // family's name; its rejection carries its key.
    let refused = fetch("eu.example", &eu).await;
    assert!(is_down(&refused, "hosts"), "{refused:?}");
    assert_eq!(eu.calls(), 2);

    // Another host, another breaker: closed, and it serves.
    let us = Script::new(&[]);
    assert_eq!(fetch("us.example", &us).await, Ok(()));
    assert_eq!(us.calls(), 1);
    assert_eq!(hosts.keys(), ["eu.example", "us.example"]);
    assert_eq!(hosts.open_members(), 1);

    // After the cooldown one probe closes the host's breaker again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(fetch("eu.example", &eu).await, Ok(()));
    assert_eq!(
        hosts.find("eu.example").map(|b| b.state()),
        Some(State::Closed)
    );
}

/// A client per downstream host, keyed by its own field.
struct Shard {
    host: String,
    script: Script,
}

impl Shard {
    #[circuit_breaker(name = "shards", key = self.host, min = 3, max_members = 50, idle = "1m")]
    #[retry(max = 3, initial = "10ms")]
    async fn get(&self) -> Result<(), ClientError> {
        self.script.send().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_method_keys_its_breaker_by_a_field_and_the_retry_chain_counts_once() {
    // Two failed attempts and a success: one successful call for the
    // member, so three such calls do not trip it (min 3).
    let shard = Shard {
        host: "shard-1".into(),
        script: Script::new(&[503, 503, 200, 503, 503, 200, 503, 503, 200]),
    };
    for _ in 0..3 {
        assert_eq!(shard.get().await, Ok(()));
    }
    assert_eq!(shard.script.calls(), 9);
    let shards = family("shards");
    assert_eq!(
        shards.find("shard-1").map(|b| b.state()),
        Some(State::Closed)
    );
    // The attribute's bounds are the family's.
    assert_eq!(shards.config().max_members(), 50);
    assert_eq!(shards.config().idle(), Duration::from_secs(60));
    assert_eq!(shards.config().breaker().min_requests(), 3);

    // Down: each call spends its three attempts, and the member trips
    // after three failed calls; the fourth is refused before any attempt.
    let down = Shard {
        host: "shard-2".into(),
        script: Script::new(&[503; 9]),
    };
    for _ in 0..3 {
        assert_eq!(down.get().await, Err(ClientError::Status(503)));
    }
    assert!(is_down(&down.get().await, "shards"));
    assert_eq!(down.script.calls(), 9);
    assert_eq!(shards.find("shard-2").map(|b| b.state()), Some(State::Open));
    assert_eq!(
        shards.find("shard-1").map(|b| b.state()),
        Some(State::Closed)
    );
}

#[circuit_breaker(name = "tenants", key = tenant, min = 1, fallback = empty)]
async fn invoices(tenant: u64, script: &Script) -> Result<Vec<u32>, ClientError> {
    script.send().await.map(|()| vec![1, 2])
}

async fn empty(_: u64, _: &Script, _: ClientError) -> Result<Vec<u32>, ClientError> {
    Ok(Vec::new())
}

#[tokio::test(start_paused = true)]
async fn an_integer_key_and_a_fallback_answer_for_the_tenant_that_failed() {
    let script = Script::new(&[503]);
    // The failure trips tenant 7's member (min 1) and the fallback answers.
    assert_eq!(invoices(7, &script).await, Ok(Vec::new()));
    // Refused: the fallback answers without a call.
    assert_eq!(invoices(7, &script).await, Ok(Vec::new()));
    assert_eq!(script.calls(), 1);
    // Tenant 8 is served.
    assert_eq!(invoices(8, &script).await, Ok(vec![1, 2]));
    assert_eq!(script.calls(), 2);
    let tenants = family("tenants");
    assert_eq!(tenants.keys(), ["7", "8"]);
    assert_eq!(tenants.find("7").map(|b| b.state()), Some(State::Open));
}

/// The key expression may take apart an argument; the argument is then
/// moved into the body, after the member was taken.
#[circuit_breaker(name = "regions", key = request.region.as_str(), min = 1)]
async fn place(request: Request, script: &Script) -> Result<(), ClientError> {
    drop(request);
    script.send().await
}

struct Request {
    region: String,
}

#[tokio::test(start_paused = true)]
async fn a_key_read_from_an_argument_the_body_then_consumes() {
    let script = Script::new(&[503]);
    let region = |name: &str| Request {
        region: name.into(),
    };
    assert_eq!(
        place(region("north"), &script).await,
        Err(ClientError::Status(503))
    );
    assert!(is_down(&place(region("north"), &script).await, "regions"));
    assert_eq!(place(region("south"), &script).await, Ok(()));
    assert_eq!(script.calls(), 2);
    assert_eq!(family("regions").keys(), ["north", "south"]);
}

#[tokio::test(start_paused = true)]
async fn every_keyed_site_is_listed_as_a_family_before_its_first_call() {
    let sites = registry::global().sites();
    let listed = |name: &str| {
        sites
            .iter()
            .any(|site| site.name == name && matches!(site.config, registry::SiteConfig::Family(_)))
    };
    for name in ["hosts", "shards", "tenants", "regions", "replicas"] {
        assert!(listed(name), "{name} is not listed: {sites:?}");
    }
}

#[async_trait::async_trait]
trait Replica: Send + Sync {
    async fn read(&self, table: &str) -> Result<(), ClientError>;
}

struct Node {
    host: String,
    script: Script,
}

/// `#[async_trait]` expands first and moves `self` into its own binding:
/// the key still reads the receiver's field.
#[async_trait::async_trait]
impl Replica for Node {
    #[circuit_breaker(name = "replicas", key = self.host, min = 1)]
    async fn read(&self, table: &str) -> Result<(), ClientError> {
        assert!(!table.is_empty());
        self.script.send().await
    }
}

#[tokio::test(start_paused = true)]
async fn an_async_trait_method_keys_its_breaker_by_its_receiver() {
    let down = Node {
        host: "replica-a".into(),
        script: Script::new(&[503]),
    };
    let up = Node {
        host: "replica-b".into(),
        script: Script::new(&[]),
    };
    assert_eq!(down.read("users").await, Err(ClientError::Status(503)));
    assert!(is_down(&down.read("users").await, "replicas"));
    assert_eq!(up.read("users").await, Ok(()));
    assert_eq!((down.script.calls(), up.script.calls()), (1, 1));
    assert_eq!(family("replicas").keys(), ["replica-a", "replica-b"]);
}
