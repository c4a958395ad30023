#![doc = include_str!("../registry.md")]
mod breakers;
mod builder;
mod checks;
mod declared;
mod duration;
#[cfg(feature = "config-file")]
mod file;
mod install;
#[cfg(not(feature = "config-file"))]
mod no_file;
mod policies;
mod sites;
mod table;

use std::collections::HashMap;
use std::fmt;
#[cfg(feature = "config-file")]
use std::path::Path;
use std::sync::{OnceLock, RwLock};

use resilience_rules::suggest::did_you_mean;

use crate::breaker::{BreakerConfig, BreakerFamily, CircuitBreaker, FamilyConfig};
use crate::error::ConfigError;
use crate::retry::{Budget, BudgetConfig, Policy, PolicyBuilder};

pub use self::builder::RegistryBuilder;
pub(crate) use self::declared::toml_key;
use self::declared::{
    SiteDeclarations, differences, family_differences, method_section, site_conflict,
};
#[cfg(feature = "config-file")]
use self::file::FileConfig;
pub use self::install::{global, install, parse_duration};
#[cfg(not(feature = "config-file"))]
use self::no_file::FileConfig;
pub(crate) use self::sites::ran as site_ran;
#[doc(hidden)]
pub use self::sites::{Defaults, LimitRate, SITES, Site, SiteDefaults};
pub use self::sites::{SiteConfig, SiteInfo};
use self::table::{Entry, Named, Origin, Shared, first_creator};

/// A state-change hook, as given to [`RegistryBuilder::on_state_change`].
type Hook = std::sync::Arc<
    dyn Fn(&'static str, crate::breaker::State, crate::breaker::State) + Send + Sync,
>;

/// The environment variable naming the config file read by
/// [`RegistryBuilder::from_env`] and by [`global()`].
pub const CONFIG_ENV: &str = "RESILIENCE_CONFIG";

/// The `service` label when none is configured (OpenTelemetry's default).
pub const UNKNOWN_SERVICE: &str = crate::telemetry::UNKNOWN_SERVICE;

/// Named breakers and retry policies; see the [module docs](self).
pub struct Registry {
    /// Leaked once per registry: the label outlives every breaker, which
    /// are `'static` too.
    service: &'static str,
    file: FileConfig,
    /// The attributes' configuration of each breaker and family name,
    /// resolved once when the registry is built.
    declared: SiteDeclarations,
    state: RwLock<Shared>,
}

impl Registry {
    /// A builder with no file and no configuration in code.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The service this process is, for the `service` label of metrics.
    pub fn service(&self) -> &'static str {
        self.service
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Shared> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.read();
        let mut names: Vec<_> = shared.breakers.keys().collect();
        names.sort();
        f.debug_struct("Registry")
            .field("service", &self.service)
            .field("file", &self.file.origin())
            .field("breakers", &names)
            .finish_non_exhaustive()
    }
}

// Most of them lay a file over the code.
#[cfg(all(test, feature = "config-file"))]
mod tests;
