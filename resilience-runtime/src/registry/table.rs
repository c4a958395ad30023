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
    pub(super) breakers: HashMap<&'static str, Entry<CircuitBreaker>>,
    pub(super) code_families: HashMap<String, FamilyConfig>,
    pub(super) families: HashMap<&'static str, Entry<BreakerFamily>>,
    pub(super) budgets: HashMap<String, &'static Budget>,
    pub(super) code_limits: HashMap<String, crate::limit::LimitConfig>,
    pub(super) limiters: HashMap<String, std::sync::Arc<crate::limit::Limiter>>,
}

/// A breaker or a family of the registry. Two words: what only a conflict
/// between call sites needs is boxed, so that a registry of 10,000
/// breakers keeps each within 512 bytes of heap, its place in the table
/// included.
pub(super) struct Entry<T: Named> {
    pub(super) item: &'static T,
    registrations: Option<Box<Registrations<T::Config>>>,
}

/// What an entry's registrations gave, where it is not the configuration
/// in force.
#[derive(Default)]
struct Registrations<C> {
    /// The attribute values of the first registration, when the file or
    /// the code changed them.
    first: Option<C>,
    /// The values of later registrations already warned about.
    warned: Vec<C>,
}

/// What the registry keeps by name, a [`CircuitBreaker`] or a
/// [`BreakerFamily`]: its configuration, where each layer of it comes
/// from, and its words in messages. The two differ only here, so that
/// one set of rules creates both and reports their conflicts.
pub(super) trait Named: Sized + 'static {
    type Config: Copy + PartialEq + Default + fmt::Debug;
    /// What it is in messages: "circuit breaker".
    const KIND: &'static str;
    /// Where the code configures one whole: "RegistryBuilder::breaker".
    const IN_CODE: &'static str;
    /// Whether a registration in code with other values than those in
    /// force is warned about. Not for a family: `Registry::breaker_for`
    /// registers it with the defaults, whatever its sites declare.
    const WARNS_CALLERS: bool;
    /// The configuration it runs with.
    fn config(&self) -> Self::Config;
    fn entries(shared: &Shared) -> &HashMap<&'static str, Entry<Self>>;
    fn entries_mut(shared: &mut Shared) -> &mut HashMap<&'static str, Entry<Self>>;
    /// The whole configurations the code gives, per name.
    fn in_code(shared: &Shared) -> &HashMap<String, Self::Config>;
    /// What the attributes declare, per name.
    fn declared(declared: &SiteDeclarations) -> &HashMap<&'static str, Self::Config>;
    /// `base` under the file's section for `name`.
    fn in_file(file: &FileConfig, name: &str, base: Self::Config) -> Self::Config;
    fn new_in(
        service: &'static str,
        name: &'static str,
        config: Self::Config,
    ) -> Result<Self, ConfigError>;
    /// A site's values, for [`first_creator`].
    fn site_defaults(config: Self::Config) -> Defaults;
    /// The settings in which `a` and `b` differ, in the attributes' words.
    fn differences(a: &Self::Config, b: &Self::Config) -> Vec<String>;
    /// Attaches a hook given to [`RegistryBuilder::on_state_change`].
    fn attach(&self, hook: Hook);
}

impl Named for CircuitBreaker {
    type Config = BreakerConfig;
    const KIND: &'static str = "circuit breaker";
    const IN_CODE: &'static str = "RegistryBuilder::breaker";
    const WARNS_CALLERS: bool = true;

    fn config(&self) -> BreakerConfig {
        *self.config()
    }
    fn entries(shared: &Shared) -> &HashMap<&'static str, Entry<Self>> {
        &shared.breakers
    }
    fn entries_mut(shared: &mut Shared) -> &mut HashMap<&'static str, Entry<Self>> {
        &mut shared.breakers
    }
    fn in_code(shared: &Shared) -> &HashMap<String, BreakerConfig> {
        &shared.code_breakers
    }
    fn declared(declared: &SiteDeclarations) -> &HashMap<&'static str, BreakerConfig> {
        &declared.breakers
    }
    fn in_file(file: &FileConfig, name: &str, base: BreakerConfig) -> BreakerConfig {
        file.breaker(name, base)
    }
    fn new_in(
        service: &'static str,
        name: &'static str,
        config: BreakerConfig,
    ) -> Result<Self, ConfigError> {
        CircuitBreaker::new_in(service, name, config)
    }
    fn site_defaults(config: BreakerConfig) -> Defaults {
        Defaults::Breaker(config)
    }
    fn differences(a: &BreakerConfig, b: &BreakerConfig) -> Vec<String> {
        differences(a, b)
    }
    fn attach(&self, hook: Hook) {
        self.on_state_change(move |name, from, to| hook(name, from, to));
    }
}

impl Named for BreakerFamily {
    type Config = FamilyConfig;
    const KIND: &'static str = "breaker family";
    const IN_CODE: &'static str = "RegistryBuilder::family";
    const WARNS_CALLERS: bool = false;

    fn config(&self) -> FamilyConfig {
        *self.config()
    }
    fn entries(shared: &Shared) -> &HashMap<&'static str, Entry<Self>> {
        &shared.families
    }
    fn entries_mut(shared: &mut Shared) -> &mut HashMap<&'static str, Entry<Self>> {
        &mut shared.families
    }
    fn in_code(shared: &Shared) -> &HashMap<String, FamilyConfig> {
        &shared.code_families
    }
    fn declared(declared: &SiteDeclarations) -> &HashMap<&'static str, FamilyConfig> {
        &declared.families
    }
    fn in_file(file: &FileConfig, name: &str, base: FamilyConfig) -> FamilyConfig {
        file.family(name, base)
    }
    fn new_in(
        service: &'static str,
        name: &'static str,
        config: FamilyConfig,
    ) -> Result<Self, ConfigError> {
        BreakerFamily::new_in(service, name, config)
    }
    fn site_defaults(config: FamilyConfig) -> Defaults {
        Defaults::Family(config)
    }
    fn differences(a: &FamilyConfig, b: &FamilyConfig) -> Vec<String> {
        family_differences(a, b)
    }
    fn attach(&self, hook: Hook) {
        self.on_state_change(move |name, from, to| hook(name, from, to));
    }
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

impl<T: Named> Entry<T> {
    pub(super) fn new(item: &'static T, first: T::Config) -> Entry<T> {
        let registrations = (first != item.config()).then(|| {
            Box::new(Registrations {
                first: Some(first),
                warned: Vec::new(),
            })
        });
        Entry {
            item,
            registrations,
        }
    }

    /// The attribute values of the first registration.
    pub(super) fn first(&self) -> T::Config {
        self.registrations
            .as_ref()
            .and_then(|registrations| registrations.first)
            .unwrap_or_else(|| self.item.config())
    }

    /// Whether a registration with `defaults` needs no warning: the first
    /// one's values, or values already warned about.
    pub(super) fn knows(&self, defaults: &T::Config) -> bool {
        self.first() == *defaults
            || self
                .registrations
                .as_ref()
                .is_some_and(|registrations| registrations.warned.contains(defaults))
    }

    pub(super) fn warned(&mut self, defaults: T::Config) {
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
