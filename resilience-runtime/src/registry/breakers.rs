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
        self.named(name, defaults, Origin::Call)
    }

    /// [`breaker`](Self::breaker) for the `#[circuit_breaker]` site at `at`.
    pub(crate) fn site_breaker(
        &self,
        name: &'static str,
        defaults: BreakerConfig,
        at: &'static std::panic::Location<'static>,
    ) -> &'static CircuitBreaker {
        self.named(name, defaults, Origin::Site(at))
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
        self.named(name, defaults, Origin::Layer)
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
        self.named(name, defaults, Origin::Call)
    }

    /// [`family`](Self::family) for the `#[circuit_breaker(key = ..)]`
    /// site at `at`.
    pub(crate) fn site_family(
        &self,
        name: &'static str,
        defaults: FamilyConfig,
        at: &'static std::panic::Location<'static>,
    ) -> &'static BreakerFamily {
        self.named(name, defaults, Origin::Site(at))
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
            .map(|entry| entry.item)
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
            return Some(entry.item);
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
            .map(|entry| entry.item)
            .collect()
    }

    /// The breaker or family `name`, created at the first call with the
    /// configuration resolved from the file, the code and `defaults` (the
    /// values its attributes declare, else those of the caller), in that
    /// order of precedence; registered by `origin`, whose values are
    /// reported when others are in force.
    fn named<T: Named>(
        &self,
        name: &'static str,
        defaults: T::Config,
        origin: Origin,
    ) -> &'static T {
        {
            let shared = self.read();
            if let Some(entry) = T::entries(&shared).get(name)
                && match origin {
                    Origin::Site(_) => entry.first() == defaults,
                    Origin::Layer => true,
                    Origin::Call => !T::WARNS_CALLERS || entry.knows(&defaults),
                }
            {
                return entry.item;
            }
        }
        let mut shared = self.write();
        if let Some(entry) = T::entries(&shared).get(name)
            && let Origin::Site(at) = origin
        {
            let first = entry.first();
            if first != defaults && !T::in_code(&shared).contains_key(name) {
                // Only what would run differently is a conflict: the file
                // may set the very settings in which the sites differ.
                let in_force = entry.item.config();
                let theirs = T::in_file(&self.file, name, defaults);
                if in_force != theirs {
                    site_conflict(
                        T::KIND,
                        name,
                        &first_creator(name, T::site_defaults(first), at),
                        at,
                        &T::differences(&in_force, &theirs),
                        T::IN_CODE,
                    );
                }
            }
            return entry.item;
        }
        if let Some(entry) = T::entries_mut(&mut shared).get_mut(name) {
            if let Origin::Call = origin
                && T::WARNS_CALLERS
                && !entry.knows(&defaults)
            {
                tracing::warn!(
                    breaker = name,
                    first = ?entry.first(),
                    ignored = ?defaults,
                    "two call sites configure {kind} `{name}` differently; the first registration wins (move the setting to the config file to make it explicit)",
                    kind = T::KIND,
                );
                entry.warned(defaults);
            }
            return entry.item;
        }
        // The attributes' configuration of the name wins over the values
        // of whichever caller comes first.
        let first = match T::declared(&self.declared).get(name) {
            Some(&declared) => {
                if T::WARNS_CALLERS && declared != defaults {
                    tracing::warn!(
                        breaker = name,
                        declared = ?declared,
                        ignored = ?defaults,
                        "{kind} `{name}` is configured by its `#[circuit_breaker]` sites; the values given here are not used (move them to the config file or to `{in_code}`)",
                        kind = T::KIND,
                        in_code = T::IN_CODE,
                    );
                }
                declared
            }
            None => defaults,
        };
        let item: &'static T = Box::leak(Box::new(self.create(&shared, name, first)));
        for hook in shared.hooks.get(name).into_iter().flatten() {
            item.attach(hook.clone());
        }
        let mut entry = Entry::new(item, first);
        if T::WARNS_CALLERS && first != defaults {
            entry.warned(defaults);
        }
        T::entries_mut(&mut shared).insert(name, entry);
        item
    }

    /// A breaker or family named `name`, with the code's configuration
    /// (else the attributes' values `first`) under the file's.
    fn create<T: Named>(&self, shared: &Shared, name: &'static str, first: T::Config) -> T {
        let from_code = T::in_code(shared).get(name).copied().unwrap_or(first);
        let config = T::in_file(&self.file, name, from_code);
        T::new_in(self.service, name, config).unwrap_or_else(|err| {
            // Each part was checked on its own; only their combination
            // can fail here.
            tracing::error!(
                breaker = name,
                error = %err,
                "the configuration file and the code combine into an invalid {kind}; using the code's values",
                kind = T::KIND,
            );
            T::new_in(self.service, name, from_code)
                .or_else(|_| T::new_in(self.service, name, T::Config::default()))
                .unwrap_or_else(|_| unreachable!("the default configuration is valid"))
        })
    }

    /// The configuration of the breaker or family `name`: the one it runs
    /// with, or before it exists, the one it would be created with from
    /// a site's `defaults`.
    pub(super) fn in_force<T: Named>(
        &self,
        shared: &Shared,
        name: &str,
        defaults: T::Config,
    ) -> T::Config {
        if let Some(entry) = T::entries(shared).get(name) {
            return entry.item.config();
        }
        let declared = T::declared(&self.declared)
            .get(name)
            .copied()
            .unwrap_or(defaults);
        let from_code = T::in_code(shared).get(name).copied().unwrap_or(declared);
        T::in_file(&self.file, name, from_code)
    }
}
