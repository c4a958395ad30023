use super::*;

fn trips_at_once() -> BreakerConfig {
    BreakerConfig::new().with_min_requests(1)
}

fn family(max_members: u32) -> BreakerFamily {
    let config = FamilyConfig::new()
        .with_breaker(trips_at_once())
        .with_max_members(max_members)
        .with_idle(Duration::from_secs(64));
    BreakerFamily::new("payments", config).unwrap()
}

fn open(breaker: &CircuitBreaker) {
    breaker.try_acquire().unwrap().failure();
    assert_eq!(breaker.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn one_breaker_per_key_named_after_the_family() {
    let family = family(10);
    let a = family.get("a.example");
    open(&a);
    assert_eq!(family.get("a.example").state(), State::Open);
    let b = family.get("b.example");
    assert_eq!(b.state(), State::Closed);
    assert_eq!((b.name(), b.key()), ("payments", Some("b.example")));
    let down = b.try_acquire().map(drop);
    assert!(down.is_ok());
    let down = a.try_acquire().map(drop).unwrap_err();
    assert_eq!(down.breaker(), "payments");
    assert_eq!(family.keys(), ["a.example", "b.example"]);
    assert_eq!(family.open_members(), 1);
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_least_recently_used_idle_member_goes() {
    let family = family(3);
    for key in ["a", "b", "c"] {
        drop(family.get(key));
        // Past the `idle / 64` step at which a use is recorded.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    drop(family.get("a"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(family.get("d"));
    assert_eq!(family.keys(), ["a", "c", "d"]);
}

#[tokio::test(start_paused = true)]
async fn open_forced_and_held_members_stay_a_failing_closed_one_may_go() {
    // Two calls to judge: one failure leaves a member closed but failing.
    let config = FamilyConfig::new()
        .with_breaker(BreakerConfig::new().with_min_requests(2))
        .with_max_members(4)
        .with_idle(Duration::from_secs(2));
    let family = BreakerFamily::new("payments", config).unwrap();
    let down = family.get("open");
    down.try_acquire().unwrap().failure();
    down.try_acquire().unwrap().failure();
    assert_eq!(down.state(), State::Open);
    drop(down);
    family.get("forced").force_closed();
    let held = family.get("held");
    family.get("failing").try_acquire().unwrap().failure();
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Only "failing" is closed, not forced and not in use: it goes,
    // with the failure in its window.
    let new = family.get("new");
    assert_eq!(family.keys(), ["forced", "held", "new", "open"]);

    // Open, forced, held twice: no room. Each new key gets a breaker
    // of its own that the family does not keep.
    let mine = family.get("one-too-many");
    assert_eq!(
        (mine.name(), mine.key()),
        ("payments", Some("one-too-many"))
    );
    mine.try_acquire().unwrap().failure();
    mine.try_acquire().unwrap().failure();
    assert_eq!(mine.state(), State::Open);
    let other = family.get("another");
    assert_eq!(other.key(), Some("another"));
    assert_eq!(other.state(), State::Closed);
    assert!(other.try_acquire().is_ok());
    assert_eq!(family.keys(), ["forced", "held", "new", "open"]);
    assert!(family.find("one-too-many").is_none());

    // Once the held handle is dropped, its member can go.
    drop(held);
    assert_eq!(family.get("room").key(), Some("room"));
    assert_eq!(family.keys(), ["forced", "new", "open", "room"]);
    drop(new);
}

#[tokio::test(start_paused = true)]
async fn a_new_key_looks_at_64_members_and_the_hand_moves_on() {
    let family = family(200);
    for i in 0..200 {
        let member = family.get(&format!("m{i}"));
        // All open but the last one.
        if i < 199 {
            open(&member);
        }
    }
    // Each new key looks at the next 64 members: the closed one is
    // found within ⌈200 / 64⌉ new keys, the others meanwhile getting
    // breakers of their own.
    let admitted = (0..4)
        .map(|i| format!("new{i}"))
        .find(|key| family.get(key).key() == Some(key.as_str()) && family.find(key).is_some());
    assert!(admitted.is_some(), "{:?}", family.len());
    assert_eq!(family.len(), 200);
    assert!(family.find("m199").is_none());
    assert_eq!(family.open_members(), 199);
}

#[tokio::test(start_paused = true)]
async fn keys_seen_once_evict_their_own_kind_first() {
    let family = family(10);
    let steady: Vec<String> = (0..5).map(|i| format!("steady{i}")).collect();
    for key in &steady {
        drop(family.get(key));
    }
    for i in 0..100 {
        // The steady keys are used between newcomers, as a service's
        // regular hosts are.
        for key in &steady {
            drop(family.get(key));
        }
        drop(family.get(&format!("once{i}")));
    }
    for key in &steady {
        assert!(
            family.find(key).is_some(),
            "{key} was evicted: {:?}",
            family.keys()
        );
    }
    assert_eq!(family.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn members_unused_for_idle_are_swept_below_the_cap() {
    let family = family(100);
    for key in ["a", "b", "c"] {
        drop(family.get(key));
    }
    open(&family.get("down"));
    tokio::time::sleep(Duration::from_secs(30)).await;
    drop(family.get("b"));
    tokio::time::sleep(Duration::from_secs(40)).await;
    // 70 s: "a" and "c" were unused for longer than 64 s, "b" was not;
    // "down" is open and stays whatever its age.
    drop(family.get("e"));
    assert_eq!(family.keys(), ["b", "down", "e"]);
}

#[tokio::test(start_paused = true)]
async fn the_gauge_tally_follows_every_member() {
    let family = family(10);
    let (a, b) = (family.get("a"), family.get("b"));
    open(&a);
    open(&b);
    assert_eq!(family.open_members(), 2);
    a.reset();
    assert_eq!(family.open_members(), 1);
    // A handle kept past its member's life still leaves the tally.
    drop(family);
    drop(b);
    let family2 = self::family(10);
    assert_eq!(family2.open_members(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_open_member_moves_to_half_open_on_the_ticker() {
    let family = family(10);
    let a = family.get("a");
    open(&a);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(a.state(), State::HalfOpen);
    assert_eq!(
        family
            .machine
            .setup
            .family
            .as_ref()
            .unwrap()
            .count(State::HalfOpen),
        1
    );
}

#[test]
fn every_value_is_checked_and_named() {
    let check = |config: FamilyConfig| config.validate().unwrap_err();
    let err = check(FamilyConfig::new().with_max_members(0));
    assert_eq!((err.field(), err.value()), ("max_members", "0"));
    let err = check(FamilyConfig::new().with_max_members(MAX_MEMBERS + 1));
    assert_eq!((err.field(), err.value()), ("max_members", "1000001"));
    let err = check(FamilyConfig::new().with_idle(Duration::from_millis(999)));
    assert_eq!((err.field(), err.value()), ("idle", "999ms"));
    let err = check(FamilyConfig::new().with_idle(Duration::from_secs(86_401)));
    assert_eq!(err.field(), "idle");
    // The same bounds and defaults the attribute's `max_members` and
    // `idle` state, in the same words.
    assert!(
        err.to_string()
            .contains("after 1s to 24h unused; the default is 5m"),
        "{err}"
    );
    let err = check(FamilyConfig::new().with_max_members(0));
    assert!(
        err.to_string()
            .contains("1 to 1000000 members (each 250 B to 1 KiB); the default is 1000"),
        "{err}"
    );
    let err = check(FamilyConfig::new().with_breaker(
        BreakerConfig::new().with_sharing(super::super::Sharing::redis("redis://x/")),
    ));
    // Without the `breaker-redis` feature the breaker's own check
    // refuses it first, naming the same field and value.
    assert_eq!(err.field(), "shared");
    assert!(err.value().contains("redis://x/"), "{err}");
    let err = check(FamilyConfig::new().with_breaker(BreakerConfig::new().with_min_requests(0)));
    assert_eq!(err.field(), "min");
    let err = BreakerFamily::new("payments", FamilyConfig::new().with_max_members(0)).unwrap_err();
    assert!(
        err.to_string().contains("breaker family `payments`"),
        "{err}"
    );
    assert!(FamilyConfig::new().validate().is_ok());
}
