//! [`RegistryBuilder`]: a registry from code and from a config file.

use super::*;

/// Builds a [`Registry`] from code and from a config file.
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `build` or `install` is called"]
pub struct RegistryBuilder {
    service: Option<String>,
    file: Option<FileConfig>,
    shared: Shared,
}

impl RegistryBuilder {
    /// The `service` label of every metric. A `service` key in the config
    /// file wins over it; the default is `"unknown_service"`.
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// The whole configuration of the breaker `name`, over the attribute's
    /// values (the config file still wins).
    pub fn breaker(mut self, name: impl Into<String>, config: BreakerConfig) -> Self {
        self.shared.code_breakers.insert(name.into(), config);
        self
    }

    /// The configuration of the breaker family `name`
    /// ([`Registry::family`]), over the attribute's values (the config file
    /// still wins).
    pub fn family(mut self, name: impl Into<String>, config: FamilyConfig) -> Self {
        self.shared.code_families.insert(name.into(), config);
        self
    }

    /// The retry policy `name`, over the attribute's values (the config
    /// file still wins).
    pub fn policy(mut self, name: impl Into<String>, policy: Policy) -> Self {
        self.shared.code_policies.insert(name.into(), policy);
        self
    }

    /// Attaches `hook` to the breaker `name` when it is created, without
    /// changing its configuration: see [`CircuitBreaker::on_state_change`].
    ///
    /// ```
    /// use resilience::registry::Registry;
    ///
    /// let registry = Registry::builder()
    ///     .on_state_change("user", |name, from, to| eprintln!("{name}: {from:?} -> {to:?}"))
    ///     .build()?;
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn on_state_change<F>(mut self, name: impl Into<String>, hook: F) -> Self
    where
        F: Fn(&'static str, crate::breaker::State, crate::breaker::State) + Send + Sync + 'static,
    {
        self.shared
            .hooks
            .entry(name.into())
            .or_default()
            .push(std::sync::Arc::new(hook));
        self
    }

    /// Reads and checks the TOML file at `path` (the `config-file`
    /// feature, on by default).
    #[cfg(feature = "config-file")]
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|err| {
            ConfigError::new(
                "resilience config",
                "file",
                path.display(),
                format!("cannot be read: {err}"),
            )
        })?;
        self.file = Some(FileConfig::parse(&text, &path.display().to_string())?);
        Ok(self)
    }

    /// Reads the file named by the `RESILIENCE_CONFIG` environment
    /// variable, when it is set.
    ///
    /// Without the `config-file` feature, a `RESILIENCE_CONFIG` that names
    /// a file is an error naming the variable, its value and the feature:
    /// the operator's settings would otherwise be silently not in force.
    pub fn from_env(self) -> Result<Self, ConfigError> {
        match std::env::var_os(CONFIG_ENV) {
            #[cfg(feature = "config-file")]
            Some(path) if !path.is_empty() => self.config_file(path),
            #[cfg(not(feature = "config-file"))]
            Some(path) if !path.is_empty() => Err(no_file::env_set(&path)),
            _ => Ok(self),
        }
    }

    /// The configuration of the retry budget `name`
    /// ([`Registry::budget`]); the config file still wins over it.
    pub fn budget(mut self, name: impl Into<String>, config: BudgetConfig) -> Self {
        self.shared.code_budgets.insert(name.into(), config);
        self
    }

    /// The load limiter `name` ([`Registry::limiter`]); a `[limits.<name>]`
    /// section of the config file replaces it.
    pub fn limit(mut self, name: impl Into<String>, config: crate::limit::LimitConfig) -> Self {
        self.shared.code_limits.insert(name.into(), config);
        self
    }

    /// Checks TOML text as if read from a file named `origin` (the
    /// `config-file` feature, on by default).
    #[cfg(feature = "config-file")]
    pub fn config_str(mut self, toml: &str, origin: &str) -> Result<Self, ConfigError> {
        self.file = Some(FileConfig::parse(toml, origin)?);
        Ok(self)
    }

    /// The registry, after checking the configuration given in code.
    pub fn build(self) -> Result<Registry, ConfigError> {
        for (name, config) in &self.shared.code_breakers {
            config
                .validate()
                .map_err(|err| err.with_subject(format!("circuit breaker `{name}`")))?;
        }
        for (name, config) in &self.shared.code_families {
            config
                .validate()
                .map_err(|err| err.with_subject(format!("breaker family `{name}`")))?;
        }
        for (name, config) in &self.shared.code_budgets {
            config
                .validate()
                .map_err(|err| err.with_subject(format!("retry budget `{name}`")))?;
        }
        for (name, config) in &self.shared.code_limits {
            config
                .validate()
                .map_err(|err| err.with_subject(format!("load limit `{name}`")))?;
        }
        let declared = SiteDeclarations::resolve(&self.shared)?;
        let registry = self.build_lenient(declared);
        registry.check_combinations()?;
        Ok(registry)
    }

    /// [`build`](Self::build), then the check of [`install`].
    pub(super) fn build_checked(self) -> Result<Registry, ConfigError> {
        let registry = self.build()?;
        registry.check_sites()?;
        Ok(registry)
    }

    pub(super) fn build_lenient(self, declared: SiteDeclarations) -> Registry {
        let file = self.file.unwrap_or_default();
        let service = file
            .service()
            .map(str::to_owned)
            .or(self.service)
            .unwrap_or_else(|| UNKNOWN_SERVICE.to_owned());
        Registry {
            service: Box::leak(service.into_boxed_str()),
            file,
            declared,
            state: RwLock::new(self.shared),
        }
    }

    /// Builds the registry and makes it the [`global()`] one; see
    /// [`install`].
    pub fn install(self) -> Result<&'static Registry, ConfigError> {
        install(self.build()?)
    }
}
