//! Every `#[retry]` and `#[circuit_breaker]` site is known to the registry
//! before its first call (registered at link time), so a config section
//! that names no site is an error, not a silent no-op.

// A user crate that forbids unsafe code can still register its sites.
#![forbid(unsafe_code)]

mod macros_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use macros_common::{ClientError, Script};
use resilience::breaker::State;
use resilience::registry::{self, Registry, SiteConfig};
use resilience::retry::Jitter;
use resilience::{circuit_breaker, retry};

#[circuit_breaker(name = "user", min = 2, ratio = 0.5, cooldown = "1s")]
#[retry(name = "user.get", max = 2)]
async fn get_user(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[circuit_breaker(name = "inventory", min = 3)]
async fn get_stock(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

// The config file's spelling, and its count window, in the attributes.
#[circuit_breaker(name = "orders", min = 4, window_calls = 50)]
#[retry(name = "orders.list", max_attempts = 3)]
async fn list_orders(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

// `min = 50` is fine alone, and so is a file's
// `window_calls = 30`; together the breaker could never trip.
#[circuit_breaker(name = "combined", min = 50)]
async fn combined(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(name = "timed", max_elapsed = "1s", attempt_timeout = "500ms")]
async fn get_timed(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(max = 4)]
async fn get_unnamed(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

// Each attempt takes a slot of the load limiter `inventory-api`, which no
// section configures: an adaptive limit at Vegas's defaults.
#[retry(name = "stock.level", limit = "inventory-api")]
async fn get_stock_level(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

// The attribute names every jitter kind, as the file does.
#[retry(name = "tx.commit", preset = "db_tx", idempotent)]
async fn get_in_tx(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(name = "feed.poll", jitter = "full")]
async fn poll_feed(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(name = "feed.fetch", jitter = "decorrelated", max_interval = "1s")]
async fn fetch_feed(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(
    name = "feed.push",
    preset = "db_tx",
    jitter = "symmetric 0.3",
    idempotent
)]
async fn push_feed(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[retry(name = "feed.tx", preset = "db_tx", jitter = 0.5, idempotent)]
async fn feed_tx(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

struct Users;

impl Users {
    #[retry(max = 2)]
    async fn fetch(&self, script: &Script) -> Result<(), ClientError> {
        script.send().await
    }
}

fn with(toml: &str) -> Registry {
    Registry::builder()
        .config_str(toml, "config.toml")
        .unwrap()
        .build()
        .unwrap()
}

fn refused(toml: &str) -> resilience::ConfigError {
    registry::install(with(toml)).unwrap_err()
}

#[test]
fn every_site_is_listed_before_any_call_with_its_effective_config() {
    let registry = with("[breakers.user]\nmin = 7\n\n[retry.\"user.get\"]\nmax_attempts = 5\n");
    let sites = registry.sites();
    let names: Vec<_> = sites.iter().map(|site| site.name).collect();
    for name in [
        "user.get",
        "registry_sites::get_unnamed",
        "registry_sites::fetch",
        "user",
        "inventory",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let user = sites.iter().find(|s| s.name == "user").unwrap();
    match &user.config {
        SiteConfig::Breaker(config) => {
            assert_eq!(config.min_requests(), 7, "the file's value");
            assert_eq!(
                config.cooldown(),
                std::time::Duration::from_secs(1),
                "the attribute's"
            );
        }
        other => panic!("{other:?}"),
    }
    let get = sites.iter().find(|s| s.name == "user.get").unwrap();
    match &get.config {
        SiteConfig::Retry(policy) => assert_eq!(policy.max_attempts(), 5),
        other => panic!("{other:?}"),
    }
    assert_eq!(user.to_string().lines().count(), 1);
    assert!(
        get.to_string().starts_with("[retry.\"user.get\"] "),
        "{get}"
    );
    // One entry per breaker name, and the listing created no breaker.
    assert_eq!(names.iter().filter(|n| **n == "user").count(), 1);
    assert!(registry.breakers().is_empty());
}

/// The listing writes durations as the config file does (`30s`), not as
/// the nanoseconds a policy keeps them in.
#[test]
fn the_listing_writes_durations_as_the_config_file_does() {
    let registry = with("[retry.timed]\nmax_elapsed = \"30s\"\n");
    let sites = registry.sites();
    let timed = sites
        .iter()
        .find(|s| s.name == "timed")
        .unwrap()
        .to_string();
    assert!(timed.contains("max_elapsed: 30s"), "{timed}");
    assert!(timed.contains("attempt_timeout: Some(500ms)"), "{timed}");
    assert!(timed.contains("initial: 100ms"), "{timed}");
    assert!(!timed.contains("30000000000"), "{timed}");
    assert!(!timed.contains("100000000"), "{timed}");
    let inventory = sites
        .iter()
        .find(|s| s.name == "inventory")
        .unwrap()
        .to_string();
    assert!(inventory.contains("cooldown: 30s"), "{inventory}");
    assert!(!inventory.contains("30000000000"), "{inventory}");
}

#[test]
fn the_docs_retry_section_named_after_a_breaker_is_refused() {
    // `[retry.user]` beside `[breakers.user]`: the policy is `user.get`.
    let err = refused("[breakers.user]\nmin = 10\n\n[retry.user]\nmax_attempts = 3\n");
    assert_eq!(err.errors().count(), 1, "{err}");
    assert_eq!(err.value(), "[retry.user]");
    assert!(
        err.reason()
            .contains("`user` is a `#[circuit_breaker]`: did you mean `[breakers.user]`?"),
        "{err}"
    );
}

#[test]
fn a_misspelt_section_is_refused_with_the_nearest_name() {
    let err = refused("[breakers.inventroy]\nmin = 10\n");
    assert_eq!(err.value(), "[breakers.inventroy]");
    assert!(err.to_string().contains("config.toml"), "{err}");
    assert!(
        err.reason()
            .contains("did you mean `[breakers.inventory]`?"),
        "{err}"
    );

    let err = refused("[retry.\"user.gte\"]\nmax_attempts = 3\n");
    assert_eq!(
        err.value(),
        "[retry.\"user.gte\"]",
        "quoted: the name has a dot"
    );
    assert!(
        err.reason()
            .contains("did you mean `[retry.\"user.get\"]`?"),
        "{err}"
    );
}

#[test]
fn a_budget_section_no_chain_draws_on_is_refused() {
    // `get_user`'s chain draws on the budget of its breaker, `user`.
    let err = refused("[budgets.user]\nratio = 0.1\n\n[budgets.usr]\nratio = 0.1\n");
    assert_eq!(err.errors().count(), 1, "{err}");
    assert_eq!(err.value(), "[budgets.usr]");
    assert!(
        err.reason().contains("did you mean `[budgets.user]`?"),
        "{err}"
    );
}

/// A `[limits.<name>]` section is checked like the others. One
/// that no `limit = ".."` names, nor the code, would leave the calls it
/// meant to protect at the defaults while the operator believes them
/// limited.
#[test]
fn a_limits_section_no_site_takes_its_slots_from_is_refused() {
    let err = refused(
        "[limits.inventory-api]\nmax_concurrent = 8\n\n[limits.inventroy-api]\nmax_concurrent = 8\n\n[limits.payments]\nadaptive = true\n",
    );
    let values: Vec<_> = err.errors().map(|e| e.value().to_owned()).collect();
    assert_eq!(
        values,
        ["[limits.inventroy-api]", "[limits.payments]"],
        "{err}"
    );
    let typo = err.errors().next().unwrap();
    assert!(typo.to_string().contains("config.toml"), "{err}");
    assert!(
        typo.reason()
            .contains("did you mean `[limits.inventory-api]`?"),
        "{err}"
    );
    let unknown = err.errors().nth(1).unwrap();
    assert!(
        unknown.reason().contains(
            "no call in the program takes its slots from a load limiter named `payments`"
        ),
        "{err}"
    );
    assert!(
        unknown.reason().contains("`RegistryBuilder::limit`"),
        "the fix for a limiter only a layer uses: {err}"
    );
    // A breaker's or a policy's name is no limiter's.
    let err = refused("[limits.user]\nmax_concurrent = 8\n");
    assert_eq!(err.value(), "[limits.user]", "{err}");
}

#[test]
fn every_unknown_section_is_reported_at_once() {
    let err = refused("[breakers.nobody]\n[breakers.inventroy]\n[retry.\"a::b\"]\n");
    let values: Vec<_> = err.errors().map(|e| e.value().to_owned()).collect();
    assert_eq!(
        values,
        [
            "[breakers.inventroy]",
            "[breakers.nobody]",
            "[retry.\"a::b\"]"
        ],
        "{err}"
    );
    assert_eq!(err.to_string().lines().count(), 3);
}

#[test]
fn every_bad_value_of_a_file_is_reported_at_once() {
    let err = Registry::builder()
        .config_str(
            "[breakers.user]\nratio = 7.0\n\n[breakers.inventory]\nmni = 3\nwindow = 60\n\n[retry.\"user.get\"]\njitter = 0.01\n",
            "config.toml",
        )
        .unwrap_err();
    let found: Vec<_> = err
        .errors()
        .map(|e| (e.subject().to_owned(), e.field().to_owned()))
        .collect();
    assert_eq!(found.len(), 4, "{err}");
    for (section, field) in [
        ("`[breakers.inventory]` in `config.toml` line 5", "mni"),
        ("`[breakers.inventory]` in `config.toml` line 6", "window"),
        // Values that read but break a rule name their line too (issue
        // 32: these had the section only).
        ("`[breakers.user]` in `config.toml` line 2", "ratio"),
        ("`[retry.\"user.get\"]` in `config.toml` line 9", "jitter"),
    ] {
        assert!(
            found.iter().any(|(s, f)| s == section && f == field),
            "{section} {field} not in {found:?}"
        );
    }
    let mni = err.errors().find(|e| e.field() == "mni").unwrap();
    assert_eq!(mni.value(), "3");
}

#[test]
fn sections_for_names_given_in_code_and_methods_by_type_are_accepted() {
    let registry = Registry::builder()
        .config_str(
            "[breakers.payments]\nmin = 5\n\n[budgets.payments]\nratio = 0.1\n\n[retry.\"registry_sites::Users::fetch\"]\nmax_attempts = 3\n\n[retry.\"registry_sites::get_unnamed\"]\nmax_attempts = 2\n\n[limits.inventory-api]\nmax_concurrent = 8\n\n[limits.payments]\nadaptive = true\n",
            "config.toml",
        )
        .unwrap()
        .breaker("payments", resilience::breaker::BreakerConfig::new())
        .budget("payments", resilience::retry::BudgetConfig::new())
        // A limiter only an HTTP layer uses is declared in code.
        .limit(
            "payments",
            resilience::limit::LimitConfig::bulkhead(4),
        )
        .build()
        .unwrap();
    // Checked, then installed: the only successful install of this binary.
    registry::install(registry).unwrap();
}

#[tokio::test(start_paused = true)]
async fn looking_a_breaker_up_by_name_keeps_the_attributes_config() {
    let registry = with("");
    let inventory = registry.find_breaker("inventory").unwrap();
    assert_eq!(
        inventory.config().min_requests(),
        3,
        "the attribute's `min`"
    );
    assert!(std::ptr::eq(
        inventory,
        registry.find_breaker("inventory").unwrap()
    ));
    assert!(registry.find_breaker("invenotry").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_hook_attached_by_name_in_the_builder_sees_the_state_changes() {
    let opened = Arc::new(AtomicU32::new(0));
    let seen = opened.clone();
    let registry = Registry::builder()
        .on_state_change("user", move |name, _, to| {
            assert_eq!(name, "user");
            if to == State::Open {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .unwrap();
    let user = registry.find_breaker("user").unwrap();
    assert_eq!(
        user.config().min_requests(),
        2,
        "the hook changed no config"
    );
    assert_eq!(user.config().cooldown(), std::time::Duration::from_secs(1));
    for _ in 0..2 {
        let _ = user
            .call(async { Err::<(), _>(ClientError::Status(503)) })
            .await;
    }
    assert_eq!(user.state(), State::Open);
    assert_eq!(opened.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn attribute_and_file_share_one_vocabulary() {
    let registry = with("");
    let orders = registry.find_breaker("orders").unwrap();
    assert_eq!(
        orders.config().window(),
        resilience::breaker::Window::Count(50)
    );
    let listed = registry
        .sites()
        .into_iter()
        .find(|s| s.name == "orders.list")
        .unwrap();
    match listed.config {
        SiteConfig::Retry(policy) => assert_eq!(policy.max_attempts(), 3),
        other => panic!("{other:?}"),
    }
    // The same keys in the file; `slow_call` in the attribute's form too.
    let registry = with(
        "[breakers.orders]\nwindow_calls = 80\nslow_call = { threshold = \"2s\", ratio = 0.8 }\n\n[retry.\"orders.list\"]\nmax_attempts = 2\n",
    );
    let orders = registry.find_breaker("orders").unwrap();
    assert_eq!(
        orders.config().window(),
        resilience::breaker::Window::Count(80)
    );
    let slow = orders.config().slow_call().unwrap();
    assert_eq!(
        (slow.threshold, slow.ratio),
        (std::time::Duration::from_secs(2), 0.8)
    );
    let err = Registry::builder()
        .config_str(
            "[breakers.orders]\nslow_call = { threshold = \"2s\", ratio = 0.8 }\nslow_ratio = 0.5\n",
            "config.toml",
        )
        .unwrap_err();
    assert_eq!((err.field(), err.value()), ("slow_ratio", "0.5"));
}

#[tokio::test(start_paused = true)]
async fn the_sites_run() {
    assert_eq!(list_orders(&Script::new(&[200])).await, Ok(()));
    // The fns above are called too, so that none is dead code.
    assert_eq!(get_user(&Script::new(&[200])).await, Ok(()));
    assert_eq!(get_stock(&Script::new(&[200])).await, Ok(()));
    assert_eq!(get_unnamed(&Script::new(&[200])).await, Ok(()));
    assert_eq!(Users.fetch(&Script::new(&[200])).await, Ok(()));
    assert_eq!(combined(&Script::new(&[200])).await, Ok(()));
    assert_eq!(get_timed(&Script::new(&[200])).await, Ok(()));
    assert_eq!(get_stock_level(&Script::new(&[200])).await, Ok(()));
    assert_eq!(get_in_tx(&Script::new(&[200])).await, Ok(()));
    assert_eq!(poll_feed(&Script::new(&[200])).await, Ok(()));
    assert_eq!(fetch_feed(&Script::new(&[200])).await, Ok(()));
    assert_eq!(push_feed(&Script::new(&[200])).await, Ok(()));
    assert_eq!(feed_tx(&Script::new(&[200])).await, Ok(()));
}

fn jitter_of(registry: &Registry, name: &str) -> Jitter {
    match registry.sites().into_iter().find(|s| s.name == name) {
        Some(site) => match site.config {
            SiteConfig::Retry(policy) => policy.backoff().jitter(),
            other => panic!("{other:?}"),
        },
        None => panic!("{name} is not listed"),
    }
}

/// One jitter vocabulary in the attribute and the file. A bare
/// number sets the amount of the site's kind, so a `db_tx` site's additive
/// jitter stays additive under a file's `jitter = 0.3` (it silently became
/// ±30 %); the file changes the kind only by naming it.
#[test]
fn jitter_kinds_are_named_alike_in_the_attribute_and_the_file() {
    let registry = with("");
    assert_eq!(jitter_of(&registry, "tx.commit"), Jitter::Additive(0.25));
    assert_eq!(jitter_of(&registry, "feed.poll"), Jitter::Full);
    assert_eq!(jitter_of(&registry, "feed.fetch"), Jitter::Decorrelated);
    assert_eq!(jitter_of(&registry, "feed.push"), Jitter::Symmetric(0.3));
    assert_eq!(jitter_of(&registry, "feed.tx"), Jitter::Additive(0.5));
    assert_eq!(jitter_of(&registry, "user.get"), Jitter::Symmetric(0.25));

    let registry = with(
        "[retry.\"tx.commit\"]\njitter = 0.3\n\n[retry.\"user.get\"]\njitter = 0.3\n\n[retry.\"feed.poll\"]\njitter = \"decorrelated\"\n\n[retry.\"feed.fetch\"]\njitter = \"additive 0.4\"\n",
    );
    assert_eq!(
        jitter_of(&registry, "tx.commit"),
        Jitter::Additive(0.3),
        "the db_tx site's additive jitter survives a bare number"
    );
    assert_eq!(jitter_of(&registry, "user.get"), Jitter::Symmetric(0.3));
    assert_eq!(jitter_of(&registry, "feed.poll"), Jitter::Decorrelated);
    assert_eq!(jitter_of(&registry, "feed.fetch"), Jitter::Additive(0.4));

    let registry = with("[retry.\"tx.commit\"]\njitter = \"symmetric 0.3\"\n");
    assert_eq!(jitter_of(&registry, "tx.commit"), Jitter::Symmetric(0.3));

    // A bare number over `jitter = "full"`: nothing to set, refused when
    // the registry is built, naming the section, the key and the value.
    let err = Registry::builder()
        .config_str("[retry.\"feed.poll\"]\njitter = 0.3\n", "config.toml")
        .unwrap()
        .build()
        .unwrap_err();
    assert!(
        err.subject().starts_with(
            "[retry.\"feed.poll\"] of `config.toml` over the values of `#[retry]` `feed.poll`"
        ),
        "{err}"
    );
    assert_eq!((err.field(), err.value()), ("jitter", "0.3"), "{err}");
    assert!(err.reason().contains("\"full\""), "{err}");
}

/// Each part was checked alone, the combination at the
/// first call, where an invalid one was dropped with one ERROR line while
/// `Registry::sites` listed it as in force. Now the registry is refused,
/// naming the section, where the other values come from, and the value.
#[test]
fn a_section_that_combines_badly_with_the_attribute_is_refused_when_built() {
    let err = Registry::builder()
        .config_str("[breakers.combined]\nwindow_calls = 30\n", "config.toml")
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(err.errors().count(), 1, "{err}");
    assert!(
        err.subject().starts_with(
            "[breakers.combined] of `config.toml` over the attribute at tests/registry_sites.rs:"
        ),
        "{err}"
    );
    assert!(err.to_string().contains("50"), "{err}");
    assert!(err.to_string().contains("30"), "{err}");

    // A retry section: `max_elapsed` under the attribute's attempt timeout,
    // reported with the breaker's, at once.
    let err = Registry::builder()
        .config_str(
            "[breakers.combined]\nwindow_calls = 30\n\n[retry.timed]\nmax_elapsed = \"400ms\"\n",
            "config.toml",
        )
        .unwrap()
        .build()
        .unwrap_err();
    let subjects: Vec<_> = err.errors().map(|e| e.subject().to_owned()).collect();
    assert_eq!(subjects.len(), 2, "{err}");
    assert!(
        subjects[1]
            .starts_with("[retry.timed] of `config.toml` over the values of `#[retry]` `timed`"),
        "{err}"
    );
    // Each alone is fine.
    with("[breakers.combined]\nwindow_calls = 60\n\n[retry.timed]\nmax_elapsed = \"2s\"\n");
}

/// A layer registered its name with
/// `BreakerConfig::new()`, so a layer built at startup (the usual case)
/// made the breaker `min = 20` whatever the `#[circuit_breaker]` of that
/// name said. Every site is known when the registry is built: the layer
/// gets the attribute's configuration, before or after the sites run.
#[tokio::test(start_paused = true)]
async fn a_layer_built_before_any_call_gets_the_attributes_configuration() {
    let registry = with("");
    let layer = resilience::tower::ResilienceLayer::from_registry(&registry, "inventory");
    let breaker = layer.breaker().unwrap();
    assert_eq!(breaker.config().min_requests(), 3, "the attribute's `min`");
    assert!(std::ptr::eq(
        registry.find_breaker("inventory").unwrap(),
        registry.breaker(
            "inventory",
            resilience::breaker::BreakerConfig::new().with_min_requests(3)
        ),
    ));
    // The file still wins over the attribute, for the layer too.
    let registry = with("[breakers.inventory]\nmin = 9\n");
    let layer = resilience::tower::ResilienceLayer::from_registry(&registry, "inventory");
    assert_eq!(layer.breaker().unwrap().config().min_requests(), 9);
    // A name no site declares: the defaults, as before.
    let layer = resilience::tower::ResilienceLayer::from_registry(&registry, "layer-only");
    assert_eq!(layer.breaker().unwrap().config().min_requests(), 20);
}

/// `Registry::sites` took the read lock a second time
/// while holding it, for a breaker not created yet; with a writer queued
/// between the two (std's lock then lets no new reader in), it never
/// returned. A writer creating breakers beside a reader listing the sites.
#[test]
fn listing_the_sites_beside_a_writer_does_not_deadlock() {
    let registry: &'static Registry = Box::leak(Box::new(with("")));
    let (done, finished) = std::sync::mpsc::channel();
    let lister = done.clone();
    std::thread::spawn(move || {
        for _ in 0..20_000 {
            assert!(!registry.sites().is_empty());
        }
        lister.send("lister").unwrap();
    });
    std::thread::spawn(move || {
        for i in 0..20_000 {
            let name: &'static str = Box::leak(format!("sites-writer-{i}").into_boxed_str());
            registry.breaker(name, resilience::breaker::BreakerConfig::new());
        }
        done.send("writer").unwrap();
    });
    for _ in 0..2 {
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("`Registry::sites` deadlocked beside a writer");
    }
}
