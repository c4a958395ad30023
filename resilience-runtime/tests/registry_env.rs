//! `RESILIENCE_CONFIG` names the file of the global registry. Alone in its
//! binary: it sets an environment variable.

use resilience_runtime::breaker::BreakerConfig;
use resilience_runtime::registry::{self, CONFIG_ENV, Registry};

#[test]
fn the_environment_names_the_file_of_the_global_registry() {
    let dir = std::env::temp_dir().join(format!("resilience-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "service = \"env-service\"\n[breakers.user]\nmin = 3\n",
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[breakers.user]\nmin = -3\n").unwrap();

    // SAFETY: the only test of this binary; no other thread reads the
    // environment meanwhile.
    unsafe { std::env::set_var(CONFIG_ENV, &bad) };
    let err = Registry::builder().from_env().unwrap_err();
    assert_eq!(
        err.subject(),
        format!("`[breakers.user]` in `{}` line 2", bad.display())
    );
    assert_eq!((err.field(), err.value()), ("min", "-3"));

    // Without an installed registry, the first use of the global one
    // refuses to run on the attributes' values: it panics with the file,
    // the key and the value, at every use until the file is fixed.
    for _ in 0..2 {
        let panic = std::panic::catch_unwind(registry::global).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains(CONFIG_ENV), "{message}");
        assert!(message.contains(&bad.display().to_string()), "{message}");
        assert!(message.contains("`min = -3`"), "{message}");
    }
    let missing = dir.join("missing.toml");
    // SAFETY: as above.
    unsafe { std::env::set_var(CONFIG_ENV, &missing) };
    let panic = std::panic::catch_unwind(registry::global).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("cannot be read"), "{message}");

    // SAFETY: as above.
    unsafe { std::env::set_var(CONFIG_ENV, &good) };
    let global = registry::global();
    assert_eq!(global.service(), "env-service");
    assert_eq!(
        global
            .breaker("user", BreakerConfig::new())
            .config()
            .min_requests(),
        3
    );
    // Installing once the global registry exists is refused.
    let err = Registry::builder().install().unwrap_err();
    assert_eq!(err.field(), "install");
    std::fs::remove_dir_all(&dir).unwrap();
}
