//! The breakers and breaker families of a registry, by name.

use super::*;

impl Registry {
    /// The breaker named `name`, created at the first call with the
    /// configuration resolved from the file, the code and `defaults` (the
    /// attribute's values), in that order of precedence.
    ///
    /// The same name always gives the same breaker. When `defaults` differ
    /// from those of the first registration, the first ones stay and a WARN
    /// names both. The reference is `'static`, so a call site can keep it
    /// in a `static`.
    pub fn breaker(&self, name: &'static str, defaults: BreakerConfig) -> &'static CircuitBreaker {
        self.breaker_from(name, defaults, Origin::Call)
    }

    /// [`breaker`](Self::breaker) for the `#[circuit_breaker]` site at `at`.
    pub(crate) fn site_breaker(
        &self,
        name: &'static str,
        defaults: BreakerConfig,
        at: &'static std::panic::Location<'static>,
    ) -> &'static CircuitBreaker {
        self.breaker_from(name, defaults, Origin::Site(at))
    }

    pub(super) fn breaker_from(
        &self,
        name: &'static str,
        defaults: BreakerConfig,
        origin: Origin,
    ) -> &'static CircuitBreaker {
        {
            let shared = self.read();
            if let Some(entry) = shared.breakers.get(name)
                && match origin {
                    Origin::Site(_) => entry.first() == defaults,
                    Origin::Layer => true,
                    Origin::Call => entry.knows(&defaults),
                }
            {
                return entry.breaker;
            }
        }
        let mut shared = self.write();
        if let Some(entry) = shared.breakers.get(name)
            && let Origin::Site(at) = origin
        {
            let first = entry.first();
            if first != defaults && !shared.code_breakers.contains_key(name) {
                // Only what would run differently is a conflict: the file
                // may set the very settings in which the sites differ.
                let in_force = *entry.breaker.config();
                let theirs = self.file.breaker(name, defaults);
                if in_force != theirs {
                    site_conflict(
                        "circuit breaker",
                        name,
                        &first_creator(name, Defaults::Breaker(first), at),
                        at,
                        &differences(&in_force, &theirs),
                        "RegistryBuilder::breaker",
                    );
                }
            }
            return entry.breaker;
        }
        if let Some(entry) = shared.breakers.get_mut(name) {
            if matches!(origin, Origin::Layer) {
                return entry.breaker;
            }
            if !entry.knows(&defaults) {
                tracing::warn!(
                    breaker = name,
                    first = ?entry.first(),
                    ignored = ?defaults,
                    "two call sites configure circuit breaker `{name}` differently; the first registration wins (move the setting to the config file to make it explicit)"
                );
                entry.warned(defaults);
            }
            return entry.breaker;
        }
        // The attributes' configuration of the name wins over the values
        // of whichever caller comes first.
        let first = match self.declared.breakers.get(name) {
            Some(&declared) => {
                if declared != defaults {
                    tracing::warn!(
                        breaker = name,
                        declared = ?declared,
                        ignored = ?defaults,
                        "circuit breaker `{name}` is configured by its `#[circuit_breaker]` sites; the values given here are not used (move them to the config file or to `RegistryBuilder::breaker`)"
                    );
                }
                declared
            }
            None => defaults,
        };
        let config = self.resolve(&shared, name, first);
        let breaker: &'static CircuitBreaker = Box::leak(Box::new(config));
        for hook in shared.hooks.get(name).into_iter().flatten() {
            let hook = hook.clone();
            breaker.on_state_change(move |name, from, to| hook(name, from, to));
        }
        let mut entry = BreakerEntry::new(breaker, first);
        if first != defaults {
            entry.warned(defaults);
        }
        shared.breakers.insert(name, entry);
        breaker
    }

    /// The breaker `name` for an HTTP or tower layer: the configuration
    /// its `#[circuit_breaker]` sites declare, or the code's, or the
    /// defaults when nothing names it; never one of the layer's own, so
    /// that the breaker is the same whichever of the layer and the sites
    /// comes first.
    #[cfg(any(feature = "reqwest-middleware", feature = "tower"))]
    pub(crate) fn layer_breaker(&self, name: &'static str) -> &'static CircuitBreaker {
        let defaults = self
            .declared
            .breakers
            .get(name)
            .copied()
            .unwrap_or_default();
        self.breaker_from(name, defaults, Origin::Layer)
    }

    pub(super) fn resolve(
        &self,
        shared: &Shared,
        name: &'static str,
        defaults: BreakerConfig,
    ) -> CircuitBreaker {
        let from_code = shared.code_breakers.get(name).copied().unwrap_or(defaults);
        let config = self.file.breaker(name, from_code);
        match CircuitBreaker::new_in(self.service, name, config) {
            Ok(breaker) => breaker,
            Err(err) => {
                // Each part was checked on its own; only their combination
                // can fail here.
                tracing::error!(
                    breaker = name,
                    error = %err,
                    "the configuration file and the code combine into an invalid breaker; using the code's values"
                );
                CircuitBreaker::new_in(self.service, name, from_code)
                    .or_else(|_| CircuitBreaker::new_in(self.service, name, BreakerConfig::new()))
                    .unwrap_or_else(|_| unreachable!("the default breaker config is valid"))
            }
        }
    }

    /// The breaker family `name` ([`BreakerFamily`]), created at the first
    /// call with the configuration resolved from the file
    /// (`[breakers.<name>]`, with `max_members` and `idle`), the code
    /// ([`RegistryBuilder::family`]) and `defaults`, in that order of
    /// precedence. The same name always gives the same family; hooks given
    /// to [`RegistryBuilder::on_state_change`] for `name` are attached to
    /// every member.
    ///
    /// ```
    /// use resilience::breaker::FamilyConfig;
    /// use resilience::registry::Registry;
    ///
    /// let registry = Registry::builder()
    ///     .config_str("[breakers.payments]\nmax_members = 500\nidle = \"10m\"\n", "inline")?
    ///     .build()?;
    /// let family = registry.family("payments", FamilyConfig::new());
    /// assert_eq!(family.config().max_members(), 500);
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn family(&self, name: &'static str, defaults: FamilyConfig) -> &'static BreakerFamily {
        self.family_from(name, defaults, Origin::Call)
    }

    /// [`family`](Self::family) for the `#[circuit_breaker(key = ..)]`
    /// site at `at`.
    pub(crate) fn site_family(
        &self,
        name: &'static str,
        defaults: FamilyConfig,
        at: &'static std::panic::Location<'static>,
    ) -> &'static BreakerFamily {
        self.family_from(name, defaults, Origin::Site(at))
    }

    pub(super) fn family_from(
        &self,
        name: &'static str,
        defaults: FamilyConfig,
        origin: Origin,
    ) -> &'static BreakerFamily {
        if let Some(entry) = self.read().families.get(name)
            && (entry.first == defaults || !matches!(origin, Origin::Site(_)))
        {
            return entry.family;
        }
        let mut shared = self.write();
        if let Some(entry) = shared.families.get(name) {
            if let Origin::Site(at) = origin
                && entry.first != defaults
                && !shared.code_families.contains_key(name)
            {
                let in_force = *entry.family.config();
                let theirs = self.file.family(name, defaults);
                if in_force != theirs {
                    site_conflict(
                        "breaker family",
                        name,
                        &first_creator(name, Defaults::Family(entry.first), at),
                        at,
                        &family_differences(&in_force, &theirs),
                        "RegistryBuilder::family",
                    );
                }
            }
            return entry.family;
        }
        let declared = self
            .declared
            .families
            .get(name)
            .copied()
            .unwrap_or(defaults);
        let from_code = shared.code_families.get(name).copied().unwrap_or(declared);
        let config = self.file.family(name, from_code);
        let family = BreakerFamily::new_in(self.service, name, config).unwrap_or_else(|err| {
            // Each part was checked on its own; only their combination
            // can fail here.
            tracing::error!(
                family = name,
                error = %err,
                "the configuration file and the code combine into an invalid breaker family; using the code's values"
            );
            BreakerFamily::new_in(self.service, name, from_code)
                .or_else(|_| BreakerFamily::new_in(self.service, name, FamilyConfig::new()))
                .unwrap_or_else(|_| unreachable!("the default family config is valid"))
        });
        let family: &'static BreakerFamily = Box::leak(Box::new(family));
        for hook in shared.hooks.get(name).into_iter().flatten() {
            let hook = hook.clone();
            family.on_state_change(move |name, from, to| hook(name, from, to));
        }
        shared.families.insert(
            name,
            FamilyEntry {
                family,
                first: declared,
            },
        );
        family
    }

    /// The breaker of `key` in the family `name`: [`family`](Self::family)
    /// with [`FamilyConfig::new`] as defaults, then [`BreakerFamily::get`].
    /// For breakers whose names are known only at run time, one per host
    /// or tenant; their metrics carry `name` as `target`, never the key.
    ///
    /// ```
    /// use resilience::registry::Registry;
    ///
    /// let registry = Registry::builder().build()?;
    /// let host = String::from("eu.payments.example");
    /// let breaker = registry.breaker_for("payments", &host);
    /// assert_eq!((breaker.name(), breaker.key()), ("payments", Some("eu.payments.example")));
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn breaker_for(&self, name: &'static str, key: &str) -> CircuitBreaker {
        self.family(name, FamilyConfig::new()).get(key)
    }

    /// The breaker families created so far.
    pub fn families(&self) -> Vec<&'static BreakerFamily> {
        self.read()
            .families
            .values()
            .map(|entry| entry.family)
            .collect()
    }

    /// The breaker named `name`, with the configuration its
    /// `#[circuit_breaker]` sites give it (or the code's, for a name given
    /// to [`RegistryBuilder::breaker`]), under the file's; `None` when no
    /// site and no code names it.
    ///
    /// Unlike [`breaker`](Self::breaker), it never brings a configuration
    /// of its own: looking a breaker up, to attach a hook or read its
    /// state, cannot change how it trips. Without the `site-list` cargo
    /// feature, a site's breaker is found once one of its sites has run.
    ///
    /// ```
    /// use resilience::registry::Registry;
    ///
    /// let registry = Registry::builder().build()?;
    /// assert!(registry.find_breaker("nobody-calls-this").is_none());
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn find_breaker(&self, name: &str) -> Option<&'static CircuitBreaker> {
        if let Some(entry) = self.read().breakers.get(name) {
            return Some(entry.breaker);
        }
        let site = self.declared.breakers.get_key_value(name);
        match site {
            Some((&name, &config)) => Some(self.breaker(name, config)),
            None => {
                let config = *self.read().code_breakers.get(name)?;
                let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
                Some(self.breaker(name, config))
            }
        }
    }

    /// Replaces the configuration of the breaker `name` before its first
    /// use; refused once the breaker exists (see the [module docs](crate::registry)).
    /// The config file still wins over it.
    pub fn reconfigure(&self, name: &str, config: BreakerConfig) -> Result<(), ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("circuit breaker `{name}`")))?;
        let mut shared = self.write();
        if shared.breakers.contains_key(name) {
            return Err(ConfigError::new(
                format!("circuit breaker `{name}`"),
                "config",
                format!("{config:?}"),
                "the breaker is already in use and its configuration is fixed; change it in the config file and restart, or call `reset`/`force_open`/`force_closed` to act on it now",
            ));
        }
        shared.code_breakers.insert(name.to_owned(), config);
        Ok(())
    }

    /// The breakers created so far, for health endpoints and metrics.
    pub fn breakers(&self) -> Vec<&'static CircuitBreaker> {
        self.read()
            .breakers
            .values()
            .map(|entry| entry.breaker)
            .collect()
    }
}
