//! The checks of a registry against the call sites of the program.

use super::*;

impl Registry {
    /// Every `#[retry]` and `#[circuit_breaker]` site linked into the
    /// program, with the configuration it runs with (the file over the
    /// code over the attribute), sorted by kind and name; one entry per
    /// breaker name. For a startup log or a health endpoint.
    ///
    /// Without the `site-list` cargo feature (or on a target whose linker
    /// does not gather the sites), only the sites that have run: each is
    /// listed from its first call on.
    ///
    /// ```
    /// use resilience::registry::{Registry, SiteConfig};
    ///
    /// #[resilience::circuit_breaker(name = "sites-doc", min = 5)]
    /// async fn call() -> Result<(), resilience::Error> {
    ///     tokio::task::yield_now().await; // the network call
    ///     Ok(())
    /// }
    ///
    /// let registry = Registry::builder()
    ///     .config_str("[breakers.sites-doc]\nmin = 7\n", "inline")?
    ///     .build()?;
    /// let site = registry.sites().into_iter().find(|s| s.name == "sites-doc").unwrap();
    /// match site.config {
    ///     SiteConfig::Breaker(config) => assert_eq!(config.min_requests(), 7),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok::<(), resilience::ConfigError>(())
    /// ```
    pub fn sites(&self) -> Vec<SiteInfo> {
        // One read lock for the whole list: taking it again while holding
        // it deadlocks once a writer queues between the two (std's lock
        // lets no new reader in while a writer waits).
        let shared = self.read();
        let mut seen = std::collections::HashSet::new();
        let mut all: Vec<SiteInfo> = sites::known()
            .filter_map(|site| {
                let config = match site.config {
                    Defaults::Retry(defaults) => {
                        SiteConfig::Retry(self.policy_in(&shared, site.name, defaults))
                    }
                    Defaults::Breaker(defaults) => {
                        if !seen.insert(site.name) {
                            return None;
                        }
                        SiteConfig::Breaker(
                            self.in_force::<CircuitBreaker>(&shared, site.name, defaults),
                        )
                    }
                    Defaults::Family(defaults) => {
                        if !seen.insert(site.name) {
                            return None;
                        }
                        SiteConfig::Family(
                            self.in_force::<BreakerFamily>(&shared, site.name, defaults),
                        )
                    }
                };
                Some(SiteInfo {
                    name: site.name,
                    config,
                })
            })
            .collect();
        all.sort_by_key(|site| (!matches!(site.config, SiteConfig::Retry(_)), site.name));
        all
    }

    /// Checks every configuration the file and the code combine into with
    /// the attributes' values, as the first call would build it: each part
    /// was checked alone, but `[breakers.x] window_calls = 30` over
    /// `#[circuit_breaker(name = "x", min = 50)]` is a breaker that could
    /// never trip. Every such combination is reported at once, naming the
    /// section and where the other values come from; nothing is left to
    /// fail, and be dropped, at the first call.
    pub(super) fn check_combinations(&self) -> Result<(), ConfigError> {
        let shared = self.read();
        let origin = self.file.origin().unwrap_or("config");
        let mut errors = Vec::new();
        let mut report = |kind: &str, name: &str, over: String, err: ConfigError| {
            for err in err.into_all() {
                errors.push(err.with_subject(format!(
                    "[{kind}.{}] of `{origin}` over {over}",
                    toml_key(name)
                )));
            }
        };
        let declared_at = |name: &str| {
            sites::linked()
                .filter(|site| site.name == name)
                .find_map(|site| site.at)
                .map_or_else(
                    || format!("the attribute of `{name}`"),
                    |at| format!("the attribute at {at}"),
                )
        };
        let mut breakers: Vec<(&str, BreakerConfig, String)> = Vec::new();
        for (name, config) in &shared.code_breakers {
            breakers.push((
                name,
                *config,
                "the code's `RegistryBuilder::breaker`".to_owned(),
            ));
        }
        for (name, config) in &self.declared.breakers {
            if !shared.code_breakers.contains_key(*name) {
                breakers.push((name, *config, declared_at(name)));
            }
        }
        breakers.sort_by(|a, b| a.0.cmp(b.0));
        for (name, base, over) in breakers {
            if let Err(err) = self.file.breaker(name, base).validate() {
                report("breakers", name, over, err);
            }
        }
        let mut families: Vec<(&str, FamilyConfig, String)> = Vec::new();
        for (name, config) in &shared.code_families {
            families.push((
                name,
                *config,
                "the code's `RegistryBuilder::family`".to_owned(),
            ));
        }
        for (name, config) in &self.declared.families {
            if !shared.code_families.contains_key(*name) {
                families.push((name, *config, declared_at(name)));
            }
        }
        families.sort_by(|a, b| a.0.cmp(b.0));
        for (name, base, over) in families {
            if let Err(err) = self.file.family(name, base).validate() {
                report("breakers", name, over, err);
            }
        }
        // Retry policies: each site's (a method's through the sections of
        // its impls' types), and each given in code.
        let mut policies: Vec<(String, PolicyBuilder, String)> = Vec::new();
        for (name, policy) in &shared.code_policies {
            policies.push((
                name.clone(),
                policy.to_builder(),
                "the code's `RegistryBuilder::policy`".to_owned(),
            ));
        }
        for site in sites::linked() {
            let Defaults::Retry(defaults) = site.config else {
                continue;
            };
            let over = format!("the values of `#[retry]` `{}`", site.name);
            if site.in_impl {
                for section in self.file.retry_names() {
                    if method_section(section) == Some(site.name)
                        && !shared.code_policies.contains_key(section)
                    {
                        policies.push((section.to_owned(), defaults, over.clone()));
                    }
                }
            } else if !shared.code_policies.contains_key(site.name) {
                policies.push((site.name.to_owned(), defaults, over));
            }
        }
        policies.sort_by(|a, b| a.0.cmp(&b.0));
        policies.dedup_by(|a, b| a.0 == b.0);
        for (name, base, over) in policies {
            if let Err(err) = self
                .file
                .try_policy(&name, base)
                .and_then(PolicyBuilder::build)
            {
                report("retry", &name, over, err);
            }
        }
        let mut budgets: Vec<(&str, BudgetConfig)> = shared
            .code_budgets
            .iter()
            .map(|(name, config)| (name.as_str(), *config))
            .collect();
        budgets.sort_by(|a, b| a.0.cmp(b.0));
        for (name, base) in budgets {
            if let Err(err) = self.file.budget(name, base).validate() {
                report(
                    "budgets",
                    name,
                    "the code's `RegistryBuilder::budget`".to_owned(),
                    err,
                );
            }
        }
        ConfigError::combine(errors).map_or(Ok(()), Err)
    }

    /// Checks that each config section names a linked site or a name given
    /// in code; see [`install`].
    pub(super) fn check_sites(&self) -> Result<(), ConfigError> {
        let linked: Vec<SiteDefaults> = sites::linked().collect();
        if linked.is_empty() {
            // No protected fn is linked into this binary (or the platform's
            // linker does not gather them): nothing to check the sections
            // against. Said, since each would then configure nothing.
            let file = &self.file;
            let sections = file.breaker_names().count()
                + file.retry_names().count()
                + file.budget_names().count()
                + file.limit_names().count();
            if sections > 0 {
                let origin = self.file.origin().unwrap_or("config");
                if cfg!(feature = "site-list") && cfg!(resilience_linked) {
                    tracing::warn!(
                        sections,
                        origin,
                        "no `#[retry]` or `#[circuit_breaker]` fn is linked into this binary, so the names of the configuration's sections could not be checked: a section names a site only if that fn is in the binary"
                    );
                } else {
                    // Said at each start: a misspelt section configures
                    // nothing, and nothing else would tell.
                    tracing::warn!(
                        sections,
                        origin,
                        "this build of `resilience` has no list of its `#[retry]` and `#[circuit_breaker]` sites ({}), so the names of the configuration's sections are not checked: a section that names no site configures nothing, without an error; `Registry::sites` lists the sites that have run",
                        if cfg!(feature = "site-list") {
                            "its target's linker does not gather them"
                        } else {
                            "its `site-list` cargo feature is off"
                        },
                    );
                }
            }
            return Ok(());
        }
        let shared = self.read();
        let breakers: Vec<&str> = linked
            .iter()
            .filter(|s| matches!(s.config, Defaults::Breaker(_) | Defaults::Family(_)))
            .map(|s| s.name)
            .chain(shared.code_breakers.keys().map(String::as_str))
            .chain(shared.code_families.keys().map(String::as_str))
            .chain(shared.hooks.keys().map(String::as_str))
            .collect();
        let policies: Vec<&str> = linked
            .iter()
            .filter(|s| matches!(s.config, Defaults::Retry(_)))
            .map(|s| s.name)
            .chain(shared.code_policies.keys().map(String::as_str))
            .collect();
        let in_impl = |section: &str| {
            // `module::Type::fn` of a method listed as `module::fn`.
            linked.iter().any(|site| {
                site.in_impl
                    && matches!(site.config, Defaults::Retry(_))
                    && method_section(section) == Some(site.name)
            })
        };
        let origin = self.file.origin().unwrap_or("config");
        let mut errors = Vec::new();
        let mut unknown = |kind: &str, what: &str, name: &str, names: &[&str], other: &[&str]| {
            let mut reason = format!(
                "no {what} in the program is named `{name}`, so this section would configure nothing"
            );
            if let Some(near) = did_you_mean(name, names.iter().copied()) {
                reason.push_str(&format!("; did you mean `[{kind}.{}]`?", toml_key(near)));
            } else if other.contains(&name) {
                let other_kind = if kind == "retry" { "breakers" } else { "retry" };
                reason.push_str(&format!(
                    "; `{name}` is a {}: did you mean `[{other_kind}.{}]`?",
                    if kind == "retry" {
                        "`#[circuit_breaker]`"
                    } else {
                        "`#[retry]` policy"
                    },
                    toml_key(name)
                ));
            } else {
                reason.push_str("; the names are the attributes' `name` (or `module::fn` for a `#[retry]` without one), listed by `Registry::sites`");
            }
            errors.push(ConfigError::new(
                format!("`{origin}`"),
                "section",
                format!("[{kind}.{}]", toml_key(name)),
                reason,
            ));
        };
        let mut sections: Vec<&str> = self.file.breaker_names().collect();
        sections.sort_unstable();
        for name in sections {
            if !breakers.contains(&name) {
                unknown(
                    "breakers",
                    "`#[circuit_breaker]`",
                    name,
                    &breakers,
                    &policies,
                );
            }
        }
        let mut sections: Vec<&str> = self.file.retry_names().collect();
        sections.sort_unstable();
        for name in sections {
            if !policies.contains(&name) && !in_impl(name) {
                unknown("retry", "`#[retry]`", name, &policies, &breakers);
            }
        }
        let budgets: Vec<&str> = linked
            .iter()
            .filter_map(|s| s.budget)
            .chain(shared.code_budgets.keys().map(String::as_str))
            .collect();
        let mut sections: Vec<&str> = self.file.budget_names().collect();
        sections.sort_unstable();
        for name in sections {
            if budgets.contains(&name) {
                continue;
            }
            let mut reason = format!(
                "no `#[retry]` in the program draws on a budget named `{name}`, so this section would configure nothing; a chain draws on the budget its `budget = \"..\"` names, or on its `#[circuit_breaker]`'s name, and one named only in code is declared with `RegistryBuilder::budget`"
            );
            if let Some(near) = did_you_mean(name, budgets.iter().copied()) {
                reason.push_str(&format!("; did you mean `[budgets.{}]`?", toml_key(near)));
            }
            errors.push(ConfigError::new(
                format!("`{origin}`"),
                "section",
                format!("[budgets.{}]", toml_key(name)),
                reason,
            ));
        }
        // A site may name a limiter no section configures: it then gets an
        // adaptive limit at Vegas's defaults, which needs no knowledge of
        // the dependency. A section no site names is the mistake.
        let limits: Vec<&str> = linked
            .iter()
            .filter_map(|s| s.limit)
            .chain(shared.code_limits.keys().map(String::as_str))
            .collect();
        let mut sections: Vec<&str> = self.file.limit_names().collect();
        sections.sort_unstable();
        for name in sections {
            if limits.contains(&name) {
                continue;
            }
            let mut reason = format!(
                "no call in the program takes its slots from a load limiter named `{name}`, so this section would configure nothing; a limiter is named by the `limit = \"..\"` of a `#[retry]` or a `#[circuit_breaker]`, and one used only by an HTTP layer is declared with `RegistryBuilder::limit`"
            );
            if let Some(near) = did_you_mean(name, limits.iter().copied()) {
                reason.push_str(&format!("; did you mean `[limits.{}]`?", toml_key(near)));
            }
            errors.push(ConfigError::new(
                format!("`{origin}`"),
                "section",
                format!("[limits.{}]", toml_key(name)),
                reason,
            ));
        }
        ConfigError::combine(errors).map_or(Ok(()), Err)
    }
}
