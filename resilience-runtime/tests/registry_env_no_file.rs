//! Without the `config-file` feature, a `RESILIENCE_CONFIG` that names a
//! file is an error naming the variable, its value and the feature: the
//! operator's settings are never silently not read. Alone in its binary:
//! it sets an environment variable. (`.ci/run` runs it with
//! `--no-default-features`.)
#![cfg(not(feature = "config-file"))]

use resilience_runtime::breaker::BreakerConfig;
use resilience_runtime::registry::{self, CONFIG_ENV, Registry};

#[test]
fn a_config_file_named_without_the_feature_is_refused_with_the_fix() {
    // Unset or empty: nothing to read, the code's settings apply.
    // SAFETY: the only test of this binary; no other thread reads the
    // environment meanwhile.
    unsafe { std::env::remove_var(CONFIG_ENV) };
    Registry::builder().from_env().unwrap().build().unwrap();
    // SAFETY: as above.
    unsafe { std::env::set_var(CONFIG_ENV, "") };
    Registry::builder().from_env().unwrap().build().unwrap();

    let path = "/etc/checkout/resilience.toml";
    // SAFETY: as above.
    unsafe { std::env::set_var(CONFIG_ENV, path) };
    let err = Registry::builder().from_env().unwrap_err();
    assert_eq!(err.field(), CONFIG_ENV);
    assert_eq!(err.value(), format!("{path:?}"));
    assert!(err.reason().contains("`config-file`"), "{err}");
    assert!(
        err.reason().contains("features = [\"config-file\"]"),
        "{err}"
    );
    assert!(
        err.reason().contains(&format!("unset {CONFIG_ENV}")),
        "{err}"
    );

    // Without an installed registry, the first use of the global one
    // refuses to run on the attributes' values, at every use.
    for _ in 0..2 {
        let panic = std::panic::catch_unwind(registry::global).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains(CONFIG_ENV), "{message}");
        assert!(message.contains(path), "{message}");
        assert!(message.contains("`config-file` cargo feature"), "{message}");
    }

    // Unset, the global registry runs on the code's and the attributes'
    // settings.
    // SAFETY: as above.
    unsafe { std::env::remove_var(CONFIG_ENV) };
    let breaker = registry::global().breaker("user", BreakerConfig::new().with_min_requests(3));
    assert_eq!(breaker.config().min_requests(), 3);
}
