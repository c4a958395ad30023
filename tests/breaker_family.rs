//! `#[circuit_breaker(name = "…", key = …)]`: a breaker per key (a host, a
//! tenant) from a family sharing the attribute's configuration, expanded
//! for real, on tokio's paused clock.

mod heap_common;
mod macros_common;

use std::time::Duration;

use heap_common::live_heap;
use macros_common::{ClientError, Script};
use resilience::breaker::{
    BreakerConfig, BreakerFamily, CircuitBreaker, FamilyConfig, FamilyKey, State,
};
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

#[cfg(feature = "site-list")]
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

// At the cap: a family whose every member sees a steady background
// error rate, below the trip threshold, still admits new keys, each with a
// breaker of its own.

/// Ten calls judged, failing at half of them: 2 failures in 10 calls keep
/// a member closed, 5 trip it.
fn judged_at_ten() -> BreakerConfig {
    BreakerConfig::new()
        .with_min_requests(10)
        .with_failure_ratio(0.5)
}

/// A family of `cap` members `tenant-0`…, each with 2 failures in its 10
/// calls: every one closed and failing, none idle in the old sense.
fn full_and_failing(name: &'static str, cap: u32) -> BreakerFamily {
    let config = FamilyConfig::new()
        .with_breaker(judged_at_ten())
        .with_max_members(cap);
    let family = BreakerFamily::new(name, config).unwrap();
    for i in 0..cap {
        background_errors(&family.get(&format!("tenant-{i}")));
    }
    assert_eq!(family.len(), cap as usize);
    assert_eq!(family.open_members(), 0);
    family
}

/// 10 calls, 2 of them failing.
fn background_errors(member: &CircuitBreaker) {
    for call in 0..10 {
        let permit = member.try_acquire().unwrap();
        if call % 5 == 0 {
            permit.failure();
        } else {
            permit.success();
        }
    }
    assert_eq!(member.state(), State::Closed);
}

fn fail_until_open(member: &CircuitBreaker) {
    for _ in 0..20 {
        if member.state() == State::Open {
            return;
        }
        member.try_acquire().unwrap().failure();
    }
    assert_eq!(member.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_under_a_background_error_rate_new_keys_get_breakers_of_their_own() {
    let family = full_and_failing("busy-tenants", 100);
    let (a, b) = (family.get("new-a"), family.get("new-b"));
    assert_eq!((a.key(), b.key()), (Some("new-a"), Some("new-b")));
    // Both are members, each in the place of an evicted closed one.
    assert_eq!(family.len(), 100);
    assert!(family.find("new-a").is_some() && family.find("new-b").is_some());

    // One newcomer failing opens its own breaker; the other serves.
    fail_until_open(&a);
    assert!(b.try_acquire().is_ok());
    assert_eq!(b.state(), State::Closed);
    assert_eq!(family.open_members(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_newcomer_at_the_cap_affects_no_other_key() {
    let family = full_and_failing("busy-hosts", 50);
    fail_until_open(&family.get("bad.example"));
    drop(family.get("bad.example"));

    // Every member left, and every later newcomer, is judged alone.
    for key in family.keys() {
        let member = family.get(&key);
        if key == "bad.example" {
            assert!(member.try_acquire().is_err());
        } else {
            assert!(member.try_acquire().is_ok(), "{key} rejects");
        }
    }
    for i in 0..200 {
        let key = format!("good-{i}.example");
        let member = family.get(&key);
        assert_eq!(member.key(), Some(key.as_str()));
        background_errors(&member);
    }
    assert_eq!(family.len(), 50);
    assert_eq!(family.open_members(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_open_or_half_open_member_is_never_evicted() {
    let family = full_and_failing("busy-shards", 20);
    // The oldest member, unused since: the first the hand would take.
    fail_until_open(&family.get("tenant-0"));
    let newcomers = |round: usize| {
        for i in 0..200 {
            background_errors(&family.get(&format!("round{round}-{i}")));
        }
    };
    newcomers(1);
    let state = |key| family.find(key).map(|member| member.state());
    assert_eq!(state("tenant-0"), Some(State::Open));
    assert!(family.get("tenant-0").try_acquire().is_err());

    // After the cooldown (30 s), half-open: still kept.
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(state("tenant-0"), Some(State::HalfOpen));
    newcomers(2);
    assert_eq!(state("tenant-0"), Some(State::HalfOpen));
    assert_eq!(family.len(), 20);

    // Its probe succeeds: closed, it may go like any other.
    family.get("tenant-0").try_acquire().unwrap().success();
    assert_eq!(state("tenant-0"), Some(State::Closed));
    newcomers(3);
    assert_eq!(state("tenant-0"), None);
}

#[tokio::test(start_paused = true)]
async fn when_no_member_can_go_a_new_key_gets_a_breaker_no_other_key_shares() {
    let config = FamilyConfig::new()
        .with_breaker(BreakerConfig::new().with_min_requests(1))
        .with_max_members(4);
    let family = BreakerFamily::new("all-down", config).unwrap();
    for i in 0..4 {
        fail_until_open(&family.get(&format!("tenant-{i}")));
    }

    // Every member open: the new key is not a member, but its breaker is
    // its own, named after it.
    let x = family.get("x");
    assert_eq!(x.key(), Some("x"));
    assert!(family.find("x").is_none());
    fail_until_open(&x);
    // Another new key is not rejected by x's failures.
    let y = family.get("y");
    assert_eq!((y.key(), y.state()), (Some("y"), State::Closed));
    assert!(y.try_acquire().is_ok());
    // Not kept, so a lookup of x starts afresh: the family fails open for
    // keys beyond its cap rather than judge them together.
    assert_eq!(family.get("x").state(), State::Closed);
    assert_eq!(family.len(), 4);
    drop(x);
    assert_eq!(family.open_members(), 4);

    // After the cooldown a probe closes tenant-0: the next new key takes
    // its place.
    tokio::time::sleep(Duration::from_secs(31)).await;
    family.get("tenant-0").try_acquire().unwrap().success();
    assert_eq!(family.get("z").key(), Some("z"));
    assert!(family.find("z").is_some() && family.find("tenant-0").is_none());
}

/// A member is its breaker's per-call state and window (the configuration,
/// labels and clock origin are the family's), its key, its place in the
/// ring the eviction hand walks and its share of the key table: at most
/// 256 B, the budget, in a family filled to its cap. (A call from
/// one thread adds nothing to it: the window's unit tests show what a
/// second thread and a failure add.)
#[test]
fn a_member_takes_at_most_256_bytes_of_heap() {
    let n = 10_000;
    let family = BreakerFamily::new("small", FamilyConfig::new().with_max_members(n)).unwrap();
    let before = live_heap();
    for key in 100_000..100_000 + u64::from(n) {
        drop(key.with_key(|key| family.get(key)));
    }
    assert_eq!(family.len(), n as usize);
    let each = (live_heap() - before) / n as isize;
    assert!(each <= 256, "{each} B a member");
}

#[test]
fn admitting_new_keys_at_the_cap_does_not_grow_the_heap() {
    let family =
        BreakerFamily::new("bounded", FamilyConfig::new().with_max_members(1_000)).unwrap();
    // Keys of one length, so that they weigh the same.
    let admit = |keys: std::ops::Range<u64>| {
        for key in keys {
            drop(key.with_key(|key| family.get(key)));
        }
    };
    let before = live_heap();
    // Filled, then a round of evictions, so that the tables have their size.
    admit(100_000..102_000);
    let full = live_heap() - before;
    assert_eq!(family.len(), 1_000);
    let before = live_heap();
    admit(102_000..152_000);
    let grown = live_heap() - before;
    assert_eq!(family.len(), 1_000);
    assert!(
        grown == 0,
        "50,000 new keys at the cap grew the heap by {grown} B (the full family takes {full} B)"
    );
}
