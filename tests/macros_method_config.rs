//! A method's `#[retry]` is configured by a `[retry."module::Type::fn"]`
//! section, and a section whose type is misspelt is reported, not silently
//! left unused. The type of a method's impl is known only once the method
//! runs (an attribute sees the fn, not its impl), so `install()` checks the
//! module and the fn, and the first call checks the type. Alone in its
//! binary: one global registry per process, and tracing caches a callsite's
//! interest process-wide.

mod macros_common;

use macros_common::{ClientError, Events, Script};
use resilience::registry::{self, Registry};
use resilience::retry;

const CONFIG: &str = r#"
[retry."macros_method_config::Users::get"]
max = 4

[retry."macros_method_config::Userz::list"]
max = 5
"#;

struct Users;

impl Users {
    #[retry(max = 2)]
    async fn get(&self, script: &Script) -> Result<(), ClientError> {
        script.send().await
    }

    #[retry(max = 2)]
    async fn list(&self, script: &Script) -> Result<(), ClientError> {
        script.send().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_method_section_applies_and_a_misspelt_type_is_reported_at_the_first_call() {
    let errors = Events::at(tracing::Level::ERROR);
    let _guard = tracing::subscriber::set_default(errors.clone());
    // Both sections name a module and a fn that have a `#[retry]` method:
    // all `install()` can check.
    registry::install(
        Registry::builder()
            .config_str(CONFIG, "macros_method_config.rs")
            .unwrap()
            .build()
            .unwrap(),
    )
    .unwrap();

    // `max = 2` in the attribute, 4 in the type's section.
    let script = Script::new(&[503, 503, 503]);
    assert_eq!(Users.get(&script).await, Ok(()));
    assert_eq!(script.calls(), 4);
    assert!(errors.lines().is_empty(), "{:?}", errors.lines());

    // `Userz` configures nothing: the attribute's 2 attempts, and the
    // section named with the name to use.
    let script = Script::new(&[503, 503, 503, 503]);
    assert_eq!(Users.list(&script).await, Err(ClientError::Status(503)));
    assert_eq!(script.calls(), 2);
    let lines = errors.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    for needle in [
        r#"[retry."macros_method_config::Userz::list"]"#,
        "configures nothing",
        r#"did you mean `[retry."macros_method_config::Users::list"]`?"#,
    ] {
        assert!(lines[0].contains(needle), "{needle} not in {}", lines[0]);
    }

    // Reported once, at the first call.
    let script = Script::new(&[200]);
    assert_eq!(Users.list(&script).await, Ok(()));
    assert_eq!(errors.lines().len(), 1);
}
