//! The config file when the `config-file` feature is off: no sections, so
//! the code's and the attributes' values apply, and a `RESILIENCE_CONFIG`
//! that names a file is an error instead of a file silently not read.

use std::ffi::OsStr;

use crate::breaker::{BreakerConfig, FamilyConfig};
use crate::error::ConfigError;
use crate::limit::LimitConfig;
use crate::retry::{BudgetConfig, PolicyBuilder};

/// A config file with no sections: what a build that cannot read one
/// runs on. Its methods are those of the `config-file` build's, each
/// answering "the file says nothing".
#[derive(Debug, Default)]
pub(super) struct FileConfig;

impl FileConfig {
    pub(super) fn limit(&self, _name: &str) -> Option<LimitConfig> {
        None
    }

    pub(super) fn breaker_names(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }

    pub(super) fn retry_names(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }

    pub(super) fn budget_names(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }

    pub(super) fn limit_names(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }

    pub(super) fn origin(&self) -> Option<&str> {
        None
    }

    pub(super) fn service(&self) -> Option<&str> {
        None
    }

    pub(super) fn breaker(&self, _name: &str, base: BreakerConfig) -> BreakerConfig {
        base
    }

    pub(super) fn family(&self, _name: &str, base: FamilyConfig) -> FamilyConfig {
        base
    }

    pub(super) fn budget(&self, _name: &str, base: BudgetConfig) -> BudgetConfig {
        base
    }

    pub(super) fn try_policy(
        &self,
        _name: &str,
        base: PolicyBuilder,
    ) -> Result<PolicyBuilder, ConfigError> {
        Ok(base)
    }
}

/// `RESILIENCE_CONFIG` names `path`, which this build cannot read: the
/// operator's settings would not be in force, so it is an error naming the
/// variable, its value and the fix.
pub(super) fn env_set(path: &OsStr) -> ConfigError {
    ConfigError::new(
        "resilience config",
        super::CONFIG_ENV,
        format!("{:?}", path.to_string_lossy()),
        format!(
            "names a config file, but this build of `resilience` cannot read one: its `config-file` cargo feature is off; enable it (`features = [\"config-file\"]` on the `resilience` dependency, or keep its default features), or unset {} to run on the code's and the attributes' settings",
            super::CONFIG_ENV
        ),
    )
}
