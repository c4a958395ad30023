use std::time::Duration;

use super::*;
use crate::breaker::Window;
use crate::retry::Jitter;

const FILE: &str = r#"
service = "checkout"

[defaults]
cooldown = "10s"

[breakers.user]
ratio = 0.3
min = 10

[retry.user]
max = 5
initial = "50ms"
"#;

fn registry() -> Registry {
    Registry::builder()
        .service("from-code")
        .breaker("user", BreakerConfig::relaxed().with_half_open(3))
        .breaker("orders", BreakerConfig::critical())
        .policy("orders", Policy::background())
        .config_str(FILE, "resilience.toml")
        .unwrap()
        .build()
        .unwrap()
}

#[test]
fn the_same_name_is_the_same_breaker() {
    let r = registry();
    let a = r.breaker("billing", BreakerConfig::new());
    let b = r.breaker("billing", BreakerConfig::new());
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.name(), "billing");
    assert_eq!(r.breakers().len(), 1);
}

#[test]
fn first_registration_wins() {
    let r = registry();
    let first = r.breaker("billing", BreakerConfig::new().with_min_requests(7));
    let second = r.breaker("billing", BreakerConfig::new().with_min_requests(99));
    assert!(std::ptr::eq(first, second));
    assert_eq!(second.config().min_requests(), 7);
}

#[test]
fn file_then_code_then_attribute() {
    let r = registry();
    // File `[breakers.user]` and `[defaults]` over the code's relaxed()
    // with 3 probes, over the attribute.
    let user = r.breaker("user", BreakerConfig::new().with_min_requests(50));
    let c = user.config();
    assert_eq!((c.failure_ratio(), c.min_requests()), (0.3, 10));
    assert_eq!(c.half_open(), 3, "from the code");
    assert_eq!(c.cooldown(), Duration::from_secs(10), "from [defaults]");
    // Code over attribute, `[defaults]` over both.
    let orders = r.breaker("orders", BreakerConfig::relaxed());
    assert_eq!(orders.config().failure_ratio(), 0.3);
    assert_eq!(orders.config().cooldown(), Duration::from_secs(10));
    // Only the attribute and `[defaults]`.
    let other = r.breaker(
        "other",
        BreakerConfig::new().with_window(Duration::from_secs(5)),
    );
    assert_eq!(
        other.config().window(),
        Window::Time(Duration::from_secs(5))
    );
    assert_eq!(other.config().cooldown(), Duration::from_secs(10));
}

#[test]
fn policies_follow_the_same_precedence() {
    let r = registry();
    let user = r.policy("user", Policy::builder().with_max_attempts(2));
    assert_eq!(user.max_attempts(), 5);
    assert_eq!(user.backoff().initial(), Duration::from_millis(50));
    assert_eq!(
        r.policy("orders", PolicyBuilder::http()),
        Policy::background()
    );
    assert_eq!(
        r.policy("none", PolicyBuilder::db_tx()),
        Policy::db_tx(),
        "the attribute's values when nothing else names it"
    );
}

#[test]
fn service_comes_from_the_file_then_the_code() {
    assert_eq!(registry().service(), "checkout");
    let r = Registry::builder().service("api").build().unwrap();
    assert_eq!(r.service(), "api");
    assert_eq!(
        Registry::builder().build().unwrap().service(),
        "unknown_service"
    );
}

#[test]
fn reconfiguring_a_breaker_in_use_is_refused() {
    let r = registry();
    r.reconfigure("billing", BreakerConfig::critical()).unwrap();
    let billing = r.breaker("billing", BreakerConfig::new());
    assert_eq!(
        billing.config().failure_ratio(),
        0.3,
        "applied before first use"
    );
    let err = r
        .reconfigure("billing", BreakerConfig::relaxed())
        .unwrap_err();
    assert_eq!(err.subject(), "circuit breaker `billing`");
    assert!(err.reason().contains("already in use"), "{err}");
    assert_eq!(billing.config().failure_ratio(), 0.3, "unchanged");
    let err = r
        .reconfigure("new", BreakerConfig::new().with_half_open(0))
        .unwrap_err();
    assert_eq!((err.field(), err.value()), ("half_open", "0"));
}

#[test]
fn invalid_code_configuration_fails_the_build() {
    let err = Registry::builder()
        .breaker("user", BreakerConfig::new().with_failure_ratio(0.0))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid circuit breaker `user`: `ratio = 0`: the failure ratio is a fraction in (0, 1], e.g. 0.5"
    );
}

fn file_error(toml: &str) -> ConfigError {
    Registry::builder()
        .config_str(toml, "app.toml")
        .unwrap_err()
}

#[test]
fn bad_files_name_the_file_the_key_and_the_value() {
    let err = file_error("[breakers.user]\nratoi = 0.3\n");
    assert_eq!(err.subject(), "`[breakers.user]` in `app.toml` line 2");
    assert_eq!((err.field(), err.value()), ("ratoi", "0.3"));
    assert!(err.reason().contains("unknown field `ratoi`"), "{err}");

    let err = file_error("[breakers.user]\nmin = \"ten\"\n");
    assert_eq!((err.field(), err.value()), ("min", "\"ten\""));
    assert_eq!(err.subject(), "`[breakers.user]` in `app.toml` line 2");

    // A value that reads but breaks a rule names its line too.
    let err = file_error("[breakers.user]\nratio = 1.5\n");
    assert_eq!(err.subject(), "`[breakers.user]` in `app.toml` line 2");
    assert_eq!((err.field(), err.value()), ("ratio", "1.5"));

    let err = file_error("[defaults]\ncooldown = \"30 parsecs\"\n");
    assert_eq!(err.subject(), "`[defaults]` in `app.toml` line 2");
    assert_eq!((err.field(), err.value()), ("cooldown", "\"30 parsecs\""));

    let err = file_error("[retry.user]\njitter = 0.01\n");
    assert_eq!(err.subject(), "`[retry.user]` in `app.toml` line 2");
    assert_eq!(err.field(), "jitter");

    let err = file_error("[breaker.user]\nmin = 1\n");
    assert_eq!(err.field(), "[breaker.user]");
    assert!(err.reason().contains("unknown field `breaker`"), "{err}");

    let err = file_error("[breakers.user]\nwindow = \"60s\"\nwindow_calls = 100\n");
    assert_eq!(err.field(), "window_calls");

    let err = file_error("service = \"\"\n");
    assert_eq!(err.field(), "service");
}

#[test]
fn every_bad_value_of_a_section_is_named_with_its_line() {
    let err = file_error(
        "[breakers.user]\n\
         ratoi = 0.3\n\
         min = \"ten\"\n\
         cooldown = \"30 parsecs\"\n\
         half_open = 0\n\
         [retry.user]\n\
         initial = \"1 fortnight\"\n\
         max_attempts = 0\n",
    );
    let all: Vec<_> = err
        .errors()
        .map(|e| (e.subject().to_owned(), e.field().to_owned()))
        .collect();
    for (line, field, section) in [
        (2, "ratoi", "breakers"),
        (3, "min", "breakers"),
        (4, "cooldown", "breakers"),
        (5, "half_open", "breakers"),
        (7, "initial", "retry"),
        (8, "max_attempts", "retry"),
    ] {
        let subject = format!("`[{section}.user]` in `app.toml` line {line}");
        assert!(
            all.contains(&(subject.clone(), field.to_owned())),
            "{field} at {subject} in {all:#?}"
        );
    }
}

#[test]
fn an_unknown_key_is_told_the_key_it_was_likely_meant_to_be() {
    let err = file_error("[breakers.user]\ncooldwon = \"30s\"\n");
    assert_eq!(err.field(), "cooldwon");
    assert!(
        err.reason()
            .starts_with("unknown key; did you mean `cooldown`?"),
        "{err}"
    );
    let err = file_error("[retry.user]\nmax_attempt = 3\n");
    assert!(
        err.reason().contains("did you mean `max_attempts`?"),
        "{err}"
    );
    // Nothing near: no guess, serde's list of the keys.
    let err = file_error("[breakers.user]\ncolour = \"red\"\n");
    assert!(!err.reason().contains("did you mean"), "{err}");
    assert!(err.reason().contains("expected one of"), "{err}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = Registry::builder()
        .config_file("/nonexistent/resilience.toml")
        .unwrap_err();
    assert_eq!(
        (err.field(), err.value()),
        ("file", "/nonexistent/resilience.toml")
    );
}

#[test]
fn a_file_on_disk_is_read() {
    let path = std::env::temp_dir().join(format!("resilience-{}.toml", std::process::id()));
    std::fs::write(&path, FILE).unwrap();
    let r = Registry::builder()
        .config_file(&path)
        .unwrap()
        .build()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(r.service(), "checkout");
    assert_eq!(
        r.breaker("user", BreakerConfig::new())
            .config()
            .min_requests(),
        10
    );
}

#[test]
fn a_conflicting_registration_is_warned_once_naming_both() {
    let r = registry();
    let warnings = crate::test_events::record(tracing::Level::WARN);
    r.breaker("billing", BreakerConfig::new().with_min_requests(7));
    r.breaker("billing", BreakerConfig::new().with_min_requests(7));
    for _ in 0..3 {
        r.breaker("billing", BreakerConfig::new().with_min_requests(99));
    }
    let seen = warnings.take();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let warning = &seen[0];
    assert!(warning.contains("breaker=\"billing\""), "{warning}");
    assert!(warning.contains("min_requests: 7"), "the first: {warning}");
    assert!(
        warning.contains("min_requests: 99"),
        "the ignored one: {warning}"
    );
    assert!(warning.contains("first registration wins"), "{warning}");
}

#[cfg(feature = "breaker-redis")]
#[test]
fn a_shared_breaker_from_the_file() {
    let registry = Registry::builder()
        .config_str(
            "[defaults]\nsync_interval = \"250ms\"\nshared = \"redis://127.0.0.1:6379/\"\n[breakers.user]\nsync_interval = \"500ms\"\n[breakers.orders]\n",
            "app.toml",
        )
        .unwrap()
        .build()
        .unwrap();
    let user = registry.breaker("user", BreakerConfig::new());
    let sharing = user.config().sharing().unwrap();
    assert_eq!(sharing.url(), "redis://127.0.0.1:6379/");
    assert_eq!(sharing.sync_interval(), Duration::from_millis(500));
    let orders = registry.breaker("orders", BreakerConfig::new());
    assert_eq!(
        orders.config().sharing().unwrap().sync_interval(),
        Duration::from_millis(250)
    );

    let err = file_error("[breakers.user]\nsync_interval = \"1s\"\n");
    assert_eq!((err.field(), err.value()), ("sync_interval", "\"1s\""));
    let err = file_error("[breakers.user]\nshared = \"redis://x/\"\nsync_interval = \"1ms\"\n");
    assert_eq!(err.subject(), "`[breakers.user]` in `app.toml` line 3");
    assert_eq!((err.field(), err.value()), ("sync_interval", "1ms"));
    let err = file_error("[breakers.user]\nshared = \"memcached://x\"\n");
    assert_eq!((err.field(), err.value()), ("shared", "\"memcached://x\""));
}

#[test]
fn budgets_come_from_the_file_over_the_code_over_the_defaults() {
    let r = Registry::builder()
        .budget(
            "user",
            BudgetConfig::new().with_min_per_second(3).with_ratio(0.5),
        )
        .budget("orders", BudgetConfig::new().with_ratio(0.05))
        .config_str(
            "[budgets.user]\nratio = 0.1\nttl = \"20s\"\n",
            "resilience.toml",
        )
        .unwrap()
        .build()
        .unwrap();
    let user = r.budget("user");
    assert!(std::ptr::eq(user, r.budget("user")));
    assert_eq!(user.name(), "user");
    assert_eq!(
        *user.config(),
        BudgetConfig::new()
            .with_ratio(0.1)
            .with_min_per_second(3)
            .with_ttl(Duration::from_secs(20))
    );
    assert_eq!(r.budget("orders").config().ratio(), 0.05);
    assert_eq!(*r.budget("billing").config(), BudgetConfig::new());
}

#[test]
fn a_bad_budget_value_names_the_file_the_section_and_the_key() {
    for (toml, field) in [
        ("[budgets.user]\nratio = 20.0\n", "ratio"),
        ("[budgets.user]\nttl = \"100ms\"\n", "ttl"),
        ("[budgets.user]\nttl = \"soon\"\n", "ttl"),
        (
            "[budgets.user]\nratio = 0.0\nmin_per_second = 0\n",
            "min_per_second",
        ),
    ] {
        let err = Registry::builder()
            .config_str(toml, "resilience.toml")
            .unwrap_err();
        assert_eq!(err.field(), field, "{toml}");
        assert!(err.subject().contains("[budgets.user]"), "{err}");
        assert!(err.subject().contains("resilience.toml"), "{err}");
    }
    let err = Registry::builder()
        .config_str("[budgets.user]\nretries = 3\n", "resilience.toml")
        .unwrap_err();
    assert!(err.to_string().contains("retries"), "{err}");
    let err = Registry::builder()
        .budget("user", BudgetConfig::new().with_ratio(-0.5))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "ratio");
    assert!(err.subject().contains("retry budget `user`"), "{err}");
}

#[test]
fn a_family_takes_the_file_then_the_code_then_the_attribute() {
    use crate::breaker::FamilyConfig;
    let toml = "[defaults]\ncooldown = \"10s\"\n\n[breakers.payments]\nmin = 7\nmax_members = 50\n";
    let r = Registry::builder()
        .service("checkout")
        .family(
            "payments",
            FamilyConfig::new()
                .with_breaker(BreakerConfig::new().with_half_open(3))
                .with_idle(Duration::from_secs(60)),
        )
        .config_str(toml, "resilience.toml")
        .unwrap()
        .build()
        .unwrap();
    let family = r.family("payments", FamilyConfig::new().with_max_members(9));
    let c = family.config();
    assert_eq!((c.max_members(), c.idle()), (50, Duration::from_secs(60)));
    let b = c.breaker();
    assert_eq!(
        (b.min_requests(), b.half_open(), b.cooldown()),
        (7, 3, Duration::from_secs(10))
    );
    // The same name, the same family, whatever the defaults.
    assert!(std::ptr::eq(
        family,
        r.family("payments", FamilyConfig::new())
    ));
    let host = String::from("eu.example");
    let breaker = r.breaker_for("payments", &host);
    assert_eq!(
        (breaker.name(), breaker.key()),
        ("payments", Some("eu.example"))
    );
    assert_eq!(breaker.config().min_requests(), 7);
    assert_eq!(family.len(), 1);
    assert_eq!(r.families().len(), 1);
}

#[test]
fn hooks_given_by_name_reach_every_member() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CHANGES: AtomicUsize = AtomicUsize::new(0);
    let r = Registry::builder()
        .family(
            "tenants",
            crate::breaker::FamilyConfig::new()
                .with_breaker(BreakerConfig::new().with_min_requests(1)),
        )
        .on_state_change("tenants", |name, _, _| {
            assert_eq!(name, "tenants");
            CHANGES.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .unwrap();
    for tenant in ["acme", "globex"] {
        r.breaker_for("tenants", tenant)
            .try_acquire()
            .unwrap()
            .failure();
    }
    assert_eq!(CHANGES.load(Ordering::Relaxed), 2);
}

#[test]
fn family_keys_in_the_file_are_checked_and_named() {
    let check = |toml: &str| {
        let err = Registry::builder().config_str(toml, "r.toml").unwrap_err();
        (
            err.field().to_owned(),
            err.value().to_owned(),
            err.to_string(),
        )
    };
    let (field, value, text) = check("[breakers.payments]\nmax_members = 0\n");
    assert_eq!((field.as_str(), value.as_str()), ("max_members", "0"));
    assert!(text.contains("[breakers.payments]"), "{text}");
    let (field, value, _) = check("[breakers.payments]\nmax_members = 2000000\n");
    assert_eq!((field.as_str(), value.as_str()), ("max_members", "2000000"));
    let (field, value, _) = check("[breakers.payments]\nidle = \"500ms\"\n");
    assert_eq!((field.as_str(), value.as_str()), ("idle", "500ms"));
    let (field, _, _) = check("[breakers.payments]\nidle = \"soon\"\n");
    assert_eq!(field, "idle");
    let (field, _, text) = check("[breakers.payments]\nmax_members = -1\n");
    assert!(text.contains("max_members"), "{field}: {text}");
}

#[test]
fn a_family_given_in_code_is_checked_at_build() {
    let err = Registry::builder()
        .family(
            "payments",
            crate::breaker::FamilyConfig::new().with_max_members(0),
        )
        .build()
        .unwrap_err();
    assert_eq!((err.field(), err.value()), ("max_members", "0"));
    assert!(
        err.to_string().contains("breaker family `payments`"),
        "{err}"
    );
}

/// The file reads the attribute's jitter vocabulary, and a bare
/// number sets the amount of the site's kind, never the kind: a `db_tx`
/// site stays additive under `jitter = 0.3` (it became ±30 % before).
#[test]
fn the_file_names_every_jitter_kind_and_a_bare_number_keeps_the_sites() {
    let jitter = |value: &str, base: PolicyBuilder| {
        Registry::builder()
            .config_str(&format!("[retry.x]\njitter = {value}\n"), "app.toml")
            .unwrap()
            .build()
            .unwrap()
            .policy("x", base)
            .backoff()
            .jitter()
    };
    let http = PolicyBuilder::http();
    let db_tx = PolicyBuilder::db_tx();
    assert_eq!(jitter("0.3", http), Jitter::Symmetric(0.3));
    assert_eq!(jitter("0.3", db_tx), Jitter::Additive(0.3));
    assert_eq!(jitter("1", db_tx), Jitter::Additive(1.0));
    assert_eq!(jitter("\"symmetric\"", db_tx), Jitter::Symmetric(0.25));
    assert_eq!(jitter("\"symmetric 0.3\"", db_tx), Jitter::Symmetric(0.3));
    assert_eq!(jitter("\"additive\"", http), Jitter::Additive(0.25));
    assert_eq!(jitter("\"additive 0.5\"", http), Jitter::Additive(0.5));
    assert_eq!(jitter("\"full\"", db_tx), Jitter::Full);
    assert_eq!(jitter("\"decorrelated\"", http), Jitter::Decorrelated);
    let full = PolicyBuilder::http().with_jitter(Jitter::Full);
    assert_eq!(jitter("\"full\"", full), Jitter::Full);
    assert_eq!(jitter("\"symmetric 0.3\"", full), Jitter::Symmetric(0.3));
}

#[test]
fn a_bad_jitter_in_the_file_names_the_key_the_value_and_the_fix() {
    for (value, shown, says) in [
        ("0.05", "0.05", "between 0.1 and 1.0"),
        ("0", "0", "between 0.1 and 1.0"),
        ("1.5", "1.5", "between 0.1 and 1.0"),
        ("\"none\"", "\"none\"", "without jitter is refused"),
        ("\"ful\"", "\"ful\"", "did you mean \"full\"?"),
        ("\"full 0.3\"", "\"full 0.3\"", "has no amount"),
        ("\"additive lots\"", "\"additive lots\"", "not a number"),
        (
            "\"additive 0.05\"",
            "\"additive 0.05\"",
            "between 0.1 and 1.0",
        ),
        ("true", "true", "an amount such as 0.3"),
    ] {
        let err = file_error(&format!("[retry.user]\njitter = {value}\n"));
        assert_eq!(
            err.subject(),
            "`[retry.user]` in `app.toml` line 2",
            "{err}"
        );
        assert_eq!((err.field(), err.value()), ("jitter", shown), "{err}");
        assert!(err.reason().contains(says), "{value}: {err}");
    }
    // A bare number over a policy whose kind has no amount: refused when
    // the section meets the policy's values, never turned into ±30 %.
    let decorrelated = Policy::builder()
        .with_jitter(Jitter::Decorrelated)
        .build()
        .unwrap();
    let err = Registry::builder()
        .policy("x", decorrelated)
        .config_str("[retry.x]\njitter = 0.3\n", "app.toml")
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(err.errors().count(), 1, "{err}");
    assert_eq!((err.field(), err.value()), ("jitter", "0.3"), "{err}");
    assert!(err.reason().contains("never its kind"), "{err}");
    assert!(err.reason().contains("\"decorrelated\""), "{err}");
    let r = Registry::builder()
        .config_str("[retry.x]\njitter = 0.3\n", "app.toml")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        r.policy("x", PolicyBuilder::http().with_jitter(Jitter::Full))
            .backoff()
            .jitter(),
        Jitter::Full,
        "the code's values, as for every section that combines badly"
    );
}

#[test]
fn a_multiplier_the_file_sets_beside_decorrelated_jitter_is_refused() {
    let toml = "[retry.feed]\njitter = \"decorrelated\"\nmultiplier = 3.0\n";
    let err = Registry::builder()
        .config_str(toml, "r.toml")
        .and_then(|builder| builder.build())
        .unwrap_err();
    assert_eq!(err.field(), "multiplier", "{err}");
    assert!(err.to_string().contains("no effect"), "{err}");
    assert!(err.to_string().contains("feed"), "{err}");
}

/// A `[retry.*]` section that does not apply to the policy the code asks
/// for at run time (a bare jitter amount over full jitter, which has none)
/// is logged at ERROR, and the code's policy runs: never dropped without a
/// word, as it was while the file's half of the lookup swallowed the error.
#[test]
fn a_retry_section_that_does_not_apply_at_run_time_is_logged() {
    let events = crate::test_events::record(tracing::Level::ERROR);
    let registry = Registry::builder()
        .config_str("[retry.\"feed.poll\"]\njitter = 0.3\n", "r.toml")
        .and_then(|builder| builder.build())
        .unwrap();
    let full = PolicyBuilder::http().with_jitter(Jitter::Full);
    let policy = registry.policy("feed.poll", full);
    assert_eq!(policy.backoff().jitter(), Jitter::Full);
    assert_eq!(events.take().len(), 1);
}

// What a site reports when another caller of its name configured the
// breaker before it ran: possible without the link-time site list, and
// checked here in every build through the sites' entry points. (Which
// site ran first is found among the sites that ran, which only a build
// without the list records: tests/registry_no_site_list.rs names it.)
#[test]
fn a_site_whose_settings_come_too_late_is_an_error_naming_both() {
    let events = crate::test_events::record(tracing::Level::WARN);
    let late = std::panic::Location::caller();
    let agreeing = std::panic::Location::caller();
    let r = Registry::builder()
        .breaker("coded", BreakerConfig::new().with_min_requests(20))
        .build()
        .unwrap();
    // What building the registry logged is not this test's.
    events.take();
    let x = r.breaker("x", BreakerConfig::new().with_min_requests(5));
    let again = r.site_breaker("x", BreakerConfig::new().with_min_requests(9), late);
    assert!(std::ptr::eq(x, again));
    assert_eq!(x.config().min_requests(), 5);
    let logged = events.take();
    assert_eq!(logged.len(), 1, "{logged:?}");
    for needle in [
        "ERROR ",
        "breaker=\"x\"",
        "circuit breaker `x` runs with the settings of a layer",
        "or the code (`Registry::breaker`, `Registry::family`) that created it before any of its sites ran",
        &format!("the `#[circuit_breaker]` site at {late} declares others"),
        "(in force, then this site's: `min` 5 and 9)",
        "`[breakers.x]`",
        "`RegistryBuilder::breaker`",
    ] {
        assert!(logged[0].contains(needle), "{needle} not in {}", logged[0]);
    }
    // A site that agrees with the breaker in force: nothing to say.
    r.site_breaker("x", BreakerConfig::new().with_min_requests(5), agreeing);
    // The code gives the name a whole configuration: the attributes'
    // values are not used, whichever runs first.
    r.site_breaker("coded", BreakerConfig::new().with_min_requests(5), agreeing);
    let coded = r.site_breaker("coded", BreakerConfig::new().with_min_requests(9), late);
    assert_eq!(coded.config().min_requests(), 20);
    assert!(events.take().is_empty());

    // A family, in its own words.
    r.family("f", FamilyConfig::new().with_max_members(10));
    r.site_family("f", FamilyConfig::new().with_max_members(20), late);
    let logged = events.take();
    assert_eq!(logged.len(), 1, "{logged:?}");
    for needle in [
        "ERROR ",
        "breaker family `f` runs with the settings of a layer",
        "`max_members` 10 and 20",
        "`RegistryBuilder::family`",
    ] {
        assert!(logged[0].contains(needle), "{needle} not in {}", logged[0]);
    }
    assert_eq!(r.families()[0].config().max_members(), 10);
}

#[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
#[test]
fn a_layer_takes_the_breaker_in_force_and_a_later_site_is_told() {
    let events = crate::test_events::record(tracing::Level::WARN);
    let at = std::panic::Location::caller();
    let r = Registry::builder().build().unwrap();
    // What building the registry logged is not this test's.
    events.take();
    // The site first: the layer takes its breaker, with no word.
    let site = r.site_breaker("a", BreakerConfig::new().with_min_requests(5), at);
    assert!(std::ptr::eq(site, r.layer_breaker("a")));
    assert!(events.take().is_empty());

    // The layer first: the defaults, and the site is told.
    let layer = r.layer_breaker("b");
    let site = r.site_breaker("b", BreakerConfig::new().with_min_requests(5), at);
    assert!(std::ptr::eq(site, layer));
    assert_eq!(
        site.config().min_requests(),
        BreakerConfig::new().min_requests()
    );
    let logged = events.take();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains("runs with the settings of a layer (with the default settings"),
        "{}",
        logged[0]
    );
}
