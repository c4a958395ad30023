//! The startup configuration overrides the values written in the
//! attributes, by name. One test: the global registry is installed once
//! per process.

mod macros_common;

use macros_common::{ClientError, Script};
use resilience::breaker::State;
use resilience::registry::{self, Registry};
use resilience::{circuit_breaker, retry};

const CONFIG: &str = r#"
[retry."inventory.get"]
max = 5

[breakers.inventory]
ratio = 1.0
"#;

#[circuit_breaker(name = "inventory", min = 2, ratio = 0.1)]
#[retry(name = "inventory.get", max = 2)]
async fn get_stock(script: &Script) -> Result<(), ClientError> {
    script.send().await
}

#[tokio::test(start_paused = true)]
async fn the_startup_config_overrides_max_and_ratio() {
    registry::install(
        Registry::builder()
            .config_str(CONFIG, "macros_config.rs")
            .unwrap()
            .build()
            .unwrap(),
    )
    .unwrap();

    // `max = 2` in the attribute, 5 in the config.
    let script = Script::new(&[503, 503, 503, 503]);
    assert_eq!(get_stock(&script).await, Ok(()));
    assert_eq!(script.calls(), 5);

    // `ratio = 0.1` in the attribute would trip on one failure out of two
    // calls; the config's 1.0 wants every call failed.
    let failing = Script::new(&[503, 503, 503, 503, 503]);
    assert_eq!(get_stock(&failing).await, Err(ClientError::Status(503)));
    let inventory = registry::global()
        .breakers()
        .into_iter()
        .find(|breaker| breaker.name() == "inventory")
        .unwrap();
    assert_eq!(inventory.config().failure_ratio(), 1.0);
    assert_eq!(inventory.config().min_requests(), 2);
    assert_eq!(inventory.state(), State::Closed);
}
