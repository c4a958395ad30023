//! The retry policies, budgets and limiters of a registry, by name.

use super::*;

impl Registry {
    /// The retry policy named `name`: `[retry.<name>]` of the file over the
    /// code's policy for that name over `defaults`.
    pub fn policy(&self, name: &str, defaults: PolicyBuilder) -> Policy {
        self.policy_in(&self.read(), name, defaults)
    }

    /// The policy of a method's `#[retry]` site, listed as `module::fn`
    /// (`listed`) and named `name` (`module::Type::fn`) now that it runs.
    ///
    /// The type of a method's impl is not known before its first call, so
    /// `install()` can only check a `[retry."module::Type::fn"]` section's
    /// module and fn. Here the type is known: a section of the same module
    /// and fn whose type is a near miss of this one (`Userz` for `Users`),
    /// while this name has no section of its own, is a misspelling that
    /// would configure nothing, and is reported with the name to use.
    #[doc(hidden)]
    pub fn method_policy(&self, listed: &str, name: &str, defaults: PolicyBuilder) -> Policy {
        if let Some(section) = self.misspelt_method_section(listed, name) {
            tracing::error!(
                section = %format!("[retry.{}]", toml_key(section)),
                method = name,
                "the configuration file's section `[retry.{}]` configures nothing: no method of that type has a `#[retry]`, and `{name}` runs with its attribute's values; did you mean `[retry.{}]`?",
                toml_key(section),
                toml_key(name),
            );
        }
        self.policy(name, defaults)
    }

    /// A `[retry."module::Type::fn"]` section of `listed`'s module and fn
    /// whose type is near `name`'s, when `name` has no section.
    pub(super) fn misspelt_method_section(&self, listed: &str, name: &str) -> Option<&str> {
        let names: Vec<&str> = self.file.retry_names().collect();
        if names.contains(&name) {
            return None;
        }
        let ty = |full: &str| full.rsplit("::").nth(1).map(str::to_owned);
        let own = ty(name)?;
        names.into_iter().find(|section| {
            method_section(section) == Some(listed)
                && ty(section).is_some_and(|other| {
                    other != own && did_you_mean(&other, [own.as_str()]).is_some()
                })
        })
    }

    /// [`policy`](Self::policy), under the read lock the caller holds.
    pub(super) fn policy_in(&self, shared: &Shared, name: &str, defaults: PolicyBuilder) -> Policy {
        let from_code = shared
            .code_policies
            .get(name)
            .map_or(defaults, Policy::to_builder);
        // A section that does not apply (a bare `jitter = 0.3` over a site's
        // `Full` jitter) is the same mistake as one that does not validate:
        // logged, never dropped without a word.
        match self
            .file
            .try_policy(name, from_code)
            .and_then(PolicyBuilder::build)
        {
            Ok(policy) => policy,
            Err(err) => {
                tracing::error!(
                    policy = name,
                    error = %err,
                    "the configuration file and the code combine into an invalid retry policy; using the code's values"
                );
                from_code
                    .build()
                    .or_else(|_| defaults.build())
                    .unwrap_or_else(|_| Policy::http())
            }
        }
    }

    /// The retry budget named `name`, shared by every chain that names it:
    /// created at the first call from `[budgets.<name>]` of the file over
    /// the code's [`RegistryBuilder::budget`] over the defaults
    /// ([`BudgetConfig::new`]). Leaked once per name.
    ///
    /// ```
    /// use resilience::registry::Registry;
    /// use resilience::retry::Policy;
    ///
    /// let registry = Registry::builder()
    ///     .config_str("[budgets.user]\nratio = 0.1\n", "inline")?
    ///     .build()?;
    /// let budget = registry.budget("user");
    /// assert_eq!(budget.config().ratio(), 0.1);
    /// assert!(std::ptr::eq(budget, registry.budget("user")));
    /// let policy = Policy::http().with_budget(budget);
    /// # let _ = policy;
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn budget(&self, name: &str) -> &'static Budget {
        if let Some(budget) = self.read().budgets.get(name) {
            return budget;
        }
        let mut shared = self.write();
        if let Some(budget) = shared.budgets.get(name) {
            return budget;
        }
        let from_code = shared.code_budgets.get(name).copied().unwrap_or_default();
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        let budget = self
            .file
            .budget(name, from_code)
            .build_named(leaked)
            .or_else(|err| {
                tracing::error!(
                    budget = name,
                    error = %err,
                    "the configuration file and the code combine into an invalid retry budget; using the code's values"
                );
                from_code.build_named(leaked)
            })
            .or_else(|_| BudgetConfig::new().build_named(leaked))
            .unwrap_or_else(|_| unreachable!("the default budget config is valid"));
        let budget: &'static Budget = Box::leak(Box::new(budget));
        shared.budgets.insert(name.to_owned(), budget);
        budget
    }

    /// The load limiter named `name` (see [`limit`](crate::limit)), one
    /// per name in this registry: the file's `[limits.<name>]` section, or
    /// else the code's [`RegistryBuilder::limit`], or else the rate limit
    /// its `#[retry]` and `#[circuit_breaker]` sites declare (`limit =
    /// "<name>", rate = "100/s"`); `None` when none configures it. A
    /// section or the code gives the whole limiter: the attributes' `rate`
    /// and `burst` are then not used. The HTTP layers built [`from_registry`](crate::tower::ResilienceLayer)
    /// put their attempts behind it.
    ///
    /// ```
    /// use resilience::registry::Registry;
    ///
    /// let registry = Registry::builder()
    ///     .config_str("[limits.users]\nadaptive = true\nmax_limit = 200\nthrottle = true\n", "limits.toml")?
    ///     .build()?;
    /// let users = registry.limiter("users").unwrap();
    /// assert_eq!(users.as_adaptive().unwrap().limit(), 20);
    /// assert!(users.as_throttle().is_some());
    /// assert!(std::sync::Arc::ptr_eq(&users, &registry.limiter("users").unwrap()));
    /// assert!(registry.limiter("orders").is_none());
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn limiter(&self, name: &str) -> Option<std::sync::Arc<crate::limit::Limiter>> {
        self.limiter_or(name, None)
    }

    /// [`limiter`](Self::limiter), built from `default` when neither the
    /// file nor the code configures `name` (what `#[retry(limit = …)]`
    /// does, with an adaptive limit at Netflix's Vegas defaults).
    pub fn limiter_or_default(
        &self,
        name: &str,
        default: crate::limit::LimitConfig,
    ) -> Option<std::sync::Arc<crate::limit::Limiter>> {
        self.limiter_or(name, Some(default))
    }

    pub(super) fn limiter_or(
        &self,
        name: &str,
        default: Option<crate::limit::LimitConfig>,
    ) -> Option<std::sync::Arc<crate::limit::Limiter>> {
        if let Some(limiter) = self.read().limiters.get(name) {
            return Some(limiter.clone());
        }
        let mut shared = self.write();
        if let Some(limiter) = shared.limiters.get(name) {
            return Some(limiter.clone());
        }
        let config = self
            .file
            .limit(name)
            .or_else(|| shared.code_limits.get(name).copied())
            .or_else(|| self.declared.limits.get(name).map(LimitRate::config))
            .or(default)?;
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        // Both were checked when the registry was built.
        let limiter = match config.build_in(self.service, leaked) {
            Ok(limiter) => std::sync::Arc::new(limiter),
            Err(err) => {
                tracing::error!(limiter = name, error = %err, "invalid load limit; calls go unlimited");
                return None;
            }
        };
        shared.limiters.insert(name.to_owned(), limiter.clone());
        Some(limiter)
    }

    /// The limiter of a `limit = "<name>"` site, which declares `declared`
    /// (its `rate` and `burst`) or nothing: [`limiter`](Self::limiter), or
    /// else the declared rate limit, or else an adaptive limit at Netflix's
    /// Vegas defaults.
    ///
    /// With the link-time list of sites, every site's rate was checked
    /// against the others' when the registry was built. Without it, the
    /// first site to run configures the name, and a later one whose rate
    /// is not in force is an ERROR naming both (its calls still go through
    /// the name's limiter, as every other caller's do).
    pub(crate) fn site_limiter(
        &self,
        name: &str,
        declared: Option<LimitRate>,
    ) -> Option<std::sync::Arc<crate::limit::Limiter>> {
        let default = declared.map_or_else(
            || crate::limit::LimitConfig::adaptive(crate::limit::VegasConfig::new()),
            |rate| rate.config(),
        );
        let limiter = self.limiter_or(name, Some(default))?;
        let configured =
            self.file.limit(name).is_some() || self.read().code_limits.contains_key(name);
        if let Some(declared) = declared
            && !configured
        {
            let in_force = limiter.as_rate().map(|rate| (rate.rate(), rate.burst()));
            if in_force != Some((declared.rate(), declared.burst())) {
                limit_conflict(name, in_force, &declared);
            }
        }
        Some(limiter)
    }
}

/// Reports, at ERROR, a site whose declared rate limit is not the one
/// its limiter runs with: possible only without the link-time list of
/// sites, when another site of the name ran first.
#[cold]
fn limit_conflict(name: &str, in_force: Option<(crate::limit::Rate, u32)>, declared: &LimitRate) {
    let in_force = match in_force {
        Some((rate, burst)) => format!("`rate = \"{rate}\"`, `burst = {burst}`"),
        None => "no rate limit (a site of the name without `rate` ran first)".to_owned(),
    };
    tracing::error!(
        limiter = name,
        site = %declared.at(),
        "load limit `{name}` runs with {in_force}; the site at {at} declares {declared}, not in force. Without the link-time list of sites (the `site-list` cargo feature, off in this build or not supported by its target) a site's rate is known only once it runs, so the first to run configures the limiter: give every site of `{name}` the same `rate` and `burst`, or set them once in the config file (`[limits.{key}]`) or in code (`RegistryBuilder::limit`)",
        at = declared.at(),
        key = toml_key(name),
    );
}
