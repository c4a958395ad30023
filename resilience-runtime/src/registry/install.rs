//! The process-wide registry: built from the environment at the first
//! protected call, or installed at startup.

use super::*;

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// Parses a duration as the config file writes it (and the attributes, at
/// compile time): an integer or a decimal and a unit, `ns`, `us`, `µs`,
/// `ms`, `s`, `m` (also `min`) or `h`, read exactly (no float). A value
/// that does not fit in a [`Duration`](std::time::Duration), or is more
/// precise than a nanosecond, is refused; the error names the text.
///
/// ```
/// use std::time::Duration;
/// use resilience::registry::parse_duration;
///
/// assert_eq!(parse_duration("1.5s")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("250ms")?, Duration::from_millis(250));
/// let err = parse_duration("340282366920938463463374607431.999999999s").unwrap_err();
/// assert!(err.to_string().contains("too long"), "{err}");
/// assert_eq!(parse_duration("10").unwrap_err().value(), "\"10\"");
/// # Ok::<(), resilience::ConfigError>(())
/// ```
pub fn parse_duration(text: &str) -> Result<std::time::Duration, ConfigError> {
    duration::duration("duration", text)
}

/// The process-wide registry used by the macros.
///
/// Installed by [`install`] (or [`RegistryBuilder::install`]) at startup,
/// the recommended way: a broken config file is then an error returned to
/// `main`. Otherwise the registry is built at the first protected call
/// from the file named by `RESILIENCE_CONFIG`, if set, and checked like
/// [`install`] checks it.
///
/// # Panics
///
/// When `RESILIENCE_CONFIG` names a file that cannot be read, does not
/// parse, holds a value out of range, or has a section that names no call
/// site (with the `site-list` feature), or names any file in a build
/// without the `config-file` feature, and no registry was installed: every
/// protected call then panics with the error (the file, the key and the
/// value). Running on the attributes' values instead would hide that the
/// operator's settings are not in force. Call [`install`] at startup to
/// get the error as a value.
pub fn global() -> &'static Registry {
    GLOBAL.get_or_init(|| {
        match Registry::builder().from_env().and_then(RegistryBuilder::build_checked) {
            Ok(registry) => {
                crate::telemetry::publish_service(registry.service());
                registry
            }
            Err(err) => panic!(
                "resilience: the config file named by {CONFIG_ENV} cannot be used, and no registry was installed: {err}"
            ),
        }
    })
}

/// Makes `registry` the [`global()`] one, after checking that each of its
/// config sections names a `#[retry]` or `#[circuit_breaker]` site of the
/// program, or a name given in code ([`RegistryBuilder::breaker`],
/// [`RegistryBuilder::policy`]): a section that matches nothing would be a
/// setting silently not in force. So must each `[budgets.<name>]` (a
/// chain's `budget`, or its breaker's name, or
/// [`RegistryBuilder::budget`]) and each `[limits.<name>]` (a site's
/// `limit = "<name>"`, or [`RegistryBuilder::limit`]). Every such section
/// is reported, with the nearest name when there is one.
///
/// Without the `site-list` cargo feature there is no list of sites to
/// check the sections against: they are accepted, and one WARN says that
/// their names were not checked.
///
/// A site's `limit` that no section names is no error: its calls go
/// through an adaptive limit at Netflix's Vegas defaults, which learns the
/// dependency's capacity instead of being told it.
///
/// Refused too when the global registry already exists (installed before,
/// or created by a first protected call): install it at startup, before
/// any call.
pub fn install(registry: Registry) -> Result<&'static Registry, ConfigError> {
    registry.check_sites()?;
    let service = registry.service();
    GLOBAL.set(registry).map_err(|_| {
        ConfigError::new(
            "resilience registry",
            "install",
            "a second registry",
            "the global registry already exists (installed earlier, or created by a first protected call); install it once, at startup, before any call",
        )
    })?;
    crate::telemetry::publish_service(service);
    Ok(global())
}
