//! The registry's tables: the live breakers and families, and what
//! created them.

use super::*;

#[derive(Default)]
pub(super) struct Shared {
    /// Whole configurations given by the code, per name.
    pub(super) code_breakers: HashMap<String, BreakerConfig>,
    pub(super) code_policies: HashMap<String, Policy>,
    /// Hooks to attach to a breaker when it is created, by name.
    pub(super) hooks: HashMap<String, Vec<Hook>>,
    pub(super) code_budgets: HashMap<String, BudgetConfig>,
    pub(super) breakers: HashMap<&'static str, BreakerEntry>,
    pub(super) code_families: HashMap<String, FamilyConfig>,
    pub(super) families: HashMap<&'static str, FamilyEntry>,
    pub(super) budgets: HashMap<String, &'static Budget>,
    pub(super) code_limits: HashMap<String, crate::limit::LimitConfig>,
    pub(super) limiters: HashMap<String, std::sync::Arc<crate::limit::Limiter>>,
}

/// A breaker of the registry. Two words: what only a conflict between
/// call sites needs is boxed, so that a registry of 10,000 breakers keeps
/// each within 512 bytes of heap, its place in the table included.
pub(super) struct BreakerEntry {
    pub(super) breaker: &'static CircuitBreaker,
    pub(super) registrations: Option<Box<Registrations>>,
}

/// What a breaker's registrations gave, where it is not the breaker's own
/// configuration.
#[derive(Default)]
pub(super) struct Registrations {
    /// The attribute values of the first registration, when the file or
    /// the code changed them.
    pub(super) first: Option<BreakerConfig>,
    /// The values of later registrations already warned about.
    pub(super) warned: Vec<BreakerConfig>,
}

/// A breaker family of the registry, and the attributes' values it was
/// created with (see [`BreakerEntry`]): one per family name, not per member.
pub(super) struct FamilyEntry {
    pub(super) family: &'static BreakerFamily,
    pub(super) first: FamilyConfig,
}

/// Who asks the registry for a breaker or a family. Without the link-time
/// list of sites, whoever comes first configures it, and a later site
/// whose settings are then not in force is reported.
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin {
    /// A `#[circuit_breaker]` site, at its first call.
    Site(&'static std::panic::Location<'static>),
    /// An HTTP or tower layer, which brings no settings of its own.
    #[cfg_attr(
        not(any(feature = "reqwest-middleware", feature = "tower")),
        allow(dead_code)
    )]
    Layer,
    /// The code: [`Registry::breaker`], [`Registry::family`], or a lookup
    /// of a name given in code.
    Call,
}

/// Who configured `name` with the attributes' values `first` before the
/// site at `at` ran, in the words of the report: the first other site of
/// the name that ran with those values, else a layer or the code. Found
/// from the sites that ran rather than kept with each breaker, whose
/// entry stays two words.
pub(super) fn first_creator(name: &str, first: Defaults, at: &std::panic::Location<'_>) -> String {
    let same = |config: Defaults| match (config, first) {
        (Defaults::Breaker(a), Defaults::Breaker(b)) => a == b,
        (Defaults::Family(a), Defaults::Family(b)) => a == b,
        _ => false,
    };
    sites::known()
        .filter(|site| site.name == name && same(site.config))
        .find_map(|site| site.at.filter(|other| **other != *at))
        .map_or_else(
            || "a layer (with the default settings: a layer brings none of its own) or the code (`Registry::breaker`, `Registry::family`) that created it before any of its sites ran".to_owned(),
            |other| format!("the site at {other}, which ran first"),
        )
}

impl BreakerEntry {
    pub(super) fn new(breaker: &'static CircuitBreaker, first: BreakerConfig) -> BreakerEntry {
        let registrations = (first != *breaker.config()).then(|| {
            Box::new(Registrations {
                first: Some(first),
                warned: Vec::new(),
            })
        });
        BreakerEntry {
            breaker,
            registrations,
        }
    }

    /// The attribute values of the first registration.
    pub(super) fn first(&self) -> BreakerConfig {
        self.registrations
            .as_ref()
            .and_then(|registrations| registrations.first)
            .unwrap_or(*self.breaker.config())
    }

    /// Whether a registration with `defaults` needs no warning: the first
    /// one's values, or values already warned about.
    pub(super) fn knows(&self, defaults: &BreakerConfig) -> bool {
        self.first() == *defaults
            || self
                .registrations
                .as_ref()
                .is_some_and(|registrations| registrations.warned.contains(defaults))
    }

    pub(super) fn warned(&mut self, defaults: BreakerConfig) {
        self.registrations
            .get_or_insert_default()
            .warned
            .push(defaults);
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("code_breakers", &self.code_breakers)
            .field("code_policies", &self.code_policies)
            .finish_non_exhaustive()
    }
}
