//! Without the `site-list` feature: what the root `Cargo.toml` says a user
//! gives up, one assertion per clause. The registry knows a site only once
//! it runs, so a config section naming no site is not refused, a
//! section's combination with a site's values is checked at that site's
//! first call, `Registry::sites` and `Registry::find_breaker` see the
//! sites that have run, and a site whose settings for a name are not in
//! force because another site of that name ran first is an ERROR naming
//! the name, both sites and both values, its call going through the
//! shared breaker. Alone in its binary: one global registry per process.
//! (`.ci/run` runs it with `--no-default-features --features
//! config-file`.)
#![cfg(not(feature = "site-list"))]

mod events_common;

use events_common::Events;
use resilience::registry::{self, Registry, SiteConfig};
use resilience::{circuit_breaker, retry};

type Result<T> = std::result::Result<T, resilience::Error>;

// Two sites of one breaker whose settings differ: the one that runs first
// configures it.
#[circuit_breaker(name = "payments", min = 5)]
async fn pay_eu() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[circuit_breaker(name = "payments", min = 9)]
async fn pay_us() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

// They differ only in a setting the file gives: the same breaker either
// way, so no conflict.
#[circuit_breaker(name = "ledger", min = 4)]
async fn ledger_read() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[circuit_breaker(name = "ledger", min = 6)]
async fn ledger_write() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[circuit_breaker(name = "tenants", key = tenant, min = 5, max_members = 100)]
async fn tenant_read(tenant: &str) -> Result<()> {
    let _ = tenant;
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[circuit_breaker(name = "tenants", key = tenant, min = 5, max_members = 200)]
async fn tenant_write(tenant: &str) -> Result<()> {
    let _ = tenant;
    tokio::task::yield_now().await; // the network call
    Ok(())
}

// `window_calls = 30` in the file under `min = 50`: a breaker that could
// never trip.
#[circuit_breaker(name = "combined", min = 50)]
async fn combined() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[retry(name = "quotes.get", max = 2)]
async fn get_quotes() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

// Two sites of one load limiter that declare other rates: the first to
// run configures it.
#[retry(limit = "partner", rate = "100/s", burst = 20)]
async fn get_partner_quote() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

#[retry(limit = "partner", rate = "50/s")]
async fn get_partner_price() -> Result<()> {
    tokio::task::yield_now().await; // the network call
    Ok(())
}

struct Users;

impl Users {
    // Listed as `registry_no_site_list::get`, named
    // `registry_no_site_list::Users::get` once it runs.
    #[retry(max = 2)]
    async fn get(&self) -> Result<()> {
        tokio::task::yield_now().await; // the network call
        Ok(())
    }
}

fn has_all(line: &str, needles: &[&str]) {
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} not in {line}");
    }
}

#[test]
fn without_the_site_list_the_registry_learns_each_site_when_it_runs() {
    let events = Events::default();
    let _guard = tracing::subscriber::set_default(events.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();

    // A section that names no site is not refused: the names cannot be
    // checked, which one WARN says, naming the feature.
    let config = "[breakers.nobody]\nmin = 3\n\n[breakers.ledger]\nmin = 10\n\n[breakers.combined]\nwindow_calls = 30\n\n[retry.\"quotes.get\"]\nmax = 3\n\n[retry.\"registry_no_site_list::Userz::get\"]\nmax = 4\n";
    let registry = Registry::builder()
        .config_str(config, "app.toml")
        .unwrap()
        .build()
        .unwrap();
    let registry = registry::install(registry).unwrap();
    let logged = events.take();
    assert_eq!(logged.len(), 1, "{logged:?}");
    has_all(
        &logged[0],
        &[
            "WARN ",
            "sections=5",
            "origin=\"app.toml\"",
            "`site-list` cargo feature is off",
            "a section that names no site configures nothing",
        ],
    );

    // Nothing has run: no site is listed, no site's breaker is found.
    assert_eq!(registry.sites(), Vec::new());
    assert!(registry.find_breaker("payments").is_none());

    let file = file!();
    runtime.block_on(async {
        // The first site of `payments` to run configures it, and the
        // registry knows the site from then on.
        pay_eu().await.unwrap();
        let payments = registry.find_breaker("payments").unwrap();
        assert_eq!(payments.config().min_requests(), 5);
        assert!(events.take().is_empty());

        // The other site's `min = 9` is not in force: an ERROR naming the
        // name, both sites and both values. Its call still runs, through
        // the one breaker of the name.
        pay_us().await.unwrap();
        assert!(std::ptr::eq(
            registry.find_breaker("payments").unwrap(),
            payments
        ));
        assert_eq!(payments.config().min_requests(), 5);
        let logged = events.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        has_all(
            &logged[0],
            &[
                "ERROR ",
                "breaker=\"payments\"",
                "circuit breaker `payments` runs with the settings of the site at",
                "which ran first",
                &format!("the `#[circuit_breaker]` site at {file}:"),
                "`min` 5 and 9",
                "`site-list` cargo feature",
                "`[breakers.payments]`",
            ],
        );
        // Both sites, each where its attribute is written.
        assert_eq!(logged[0].matches(file).count(), 4, "{}", logged[0]);
        // Once: each site resolves its breaker once.
        pay_us().await.unwrap();
        pay_eu().await.unwrap();
        assert!(events.take().is_empty());

        // The sites of `ledger` differ in `min` only, which the file sets:
        // the breaker is the same whichever runs first, so no error.
        ledger_write().await.unwrap();
        ledger_read().await.unwrap();
        assert_eq!(
            registry
                .find_breaker("ledger")
                .unwrap()
                .config()
                .min_requests(),
            10
        );
        assert!(events.take().is_empty());

        // The same for a family, with its own settings.
        tenant_read("acme").await.unwrap();
        tenant_write("acme").await.unwrap();
        let logged = events.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        has_all(
            &logged[0],
            &[
                "ERROR ",
                "breaker=\"tenants\"",
                "breaker family `tenants` runs with the settings of the site at",
                "`max_members` 100 and 200",
                "`RegistryBuilder::family`",
            ],
        );
        let families = registry.families();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].config().max_members(), 100);

        // The file's section combined with the site's values is checked at
        // the site's first call, not at `install`: an ERROR, and the
        // breaker runs on the attribute's values without the section.
        combined().await.unwrap();
        let logged = events.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        has_all(
            &logged[0],
            &[
                "ERROR ",
                "breaker=\"combined\"",
                "combine into an invalid circuit breaker",
            ],
        );
        let config = *registry.find_breaker("combined").unwrap().config();
        assert_eq!(config.min_requests(), 50);
        assert_ne!(config.window(), resilience::breaker::Window::Count(30));

        get_quotes().await.unwrap();

        // A load limiter's rate: the first site to run declares it, and a
        // later site whose rate is not in force is an ERROR naming both
        // rates and the later site, its calls going through the one
        // limiter of the name.
        get_partner_quote().await.unwrap();
        assert!(events.take().is_empty());
        get_partner_price().await.unwrap();
        let partner = registry.limiter("partner").unwrap();
        let rate = partner.as_rate().unwrap();
        assert_eq!(
            (rate.rate().to_string(), rate.burst()),
            ("100/s".to_owned(), 20)
        );
        let logged = events.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        has_all(
            &logged[0],
            &[
                "ERROR ",
                "limiter=\"partner\"",
                "load limit `partner` runs with `rate = \"100/s\"`, `burst = 20`",
                &format!("the site at {file}:"),
                "declares `rate = \"50/s\"`, not in force",
                "`site-list` cargo feature",
                "`[limits.partner]`",
            ],
        );

        // A method's section whose type is a near miss is reported at the
        // method's first call, as with the list: the method is known then.
        Users.get().await.unwrap();
        let logged = events.take();
        assert_eq!(logged.len(), 1, "{logged:?}");
        has_all(
            &logged[0],
            &[
                "ERROR ",
                "configures nothing",
                "did you mean `[retry.\"registry_no_site_list::Users::get\"]`?",
            ],
        );
    });

    // Listed now that they ran, with the settings in force: one entry per
    // breaker name, the file over the attribute.
    let sites = registry.sites();
    let names: Vec<&str> = sites.iter().map(|site| site.name).collect();
    assert_eq!(
        names,
        [
            "quotes.get",
            "registry_no_site_list::get",
            "registry_no_site_list::get_partner_price",
            "registry_no_site_list::get_partner_quote",
            "combined",
            "ledger",
            "payments",
            "tenants"
        ]
    );
    match &sites[0].config {
        SiteConfig::Retry(policy) => assert_eq!(policy.max_attempts(), 3),
        other => panic!("{other:?}"),
    }
    match &sites[6].config {
        SiteConfig::Breaker(config) => assert_eq!(config.min_requests(), 5),
        other => panic!("{other:?}"),
    }
    assert!(events.take().is_empty());
}
