//! Named circuit breakers and retry policies, configured once at startup.
//!
//! A breaker protects a dependency, not a call site: every
//! `#[circuit_breaker(name = "user")]` in the program gets the same
//! [`CircuitBreaker`], from [`global()`]`.breaker("user", ..)`.
//!
//! # Where the settings come from
//!
//! For each setting, the first of these that gives it wins:
//!
//! 1. the config file: `[breakers.<name>]`, then `[defaults]` (which applies
//!    to every breaker), and `[retry.<name>]` for retry policies;
//! 2. the code: [`RegistryBuilder::breaker`] and [`RegistryBuilder::policy`]
//!    (a whole configuration for one name);
//! 3. the values written in the attribute at the call site (or given to
//!    [`Registry::breaker`]).
//!
//! The file is read with the `config-file` cargo feature, on by default
//! (without it, `serde_derive` and `toml` leave the build, the settings
//! come from the code and the attributes, and a set `RESILIENCE_CONFIG` is
//! an error naming the feature, never a file silently not read). It is
//! named by [`RegistryBuilder::config_file`], or by the
//! `RESILIENCE_CONFIG` environment variable ([`RegistryBuilder::from_env`]):
//!
//! ```toml
//! service = "checkout"        # the `service` label of every metric
//!
//! [defaults]                  # every breaker
//! cooldown = "10s"
//!
//! [breakers.user]
//! min = 10                    # at least 10 calls in the window …
//! ratio = 0.3                 # … of which 30 % failed: trip
//! window = "60s"              # or `window_calls = 100`
//! half_open = 1               # probes to close again, 1 to 65535
//! slow_call = "2s"            # optional, with `slow_ratio`, or as in the
//!                             # attribute: { threshold = "2s", ratio = 0.8 }
//! slow_ratio = 0.8
//! # shared = "redis://127.0.0.1:6379/"   # feature `breaker-redis`: one breaker
//! # sync_interval = "1s"                 # for every replica of the service
//!
//! [retry."user.get"]         # a `#[retry(name = "user.get")]`; quoted: it has a dot
//! max_attempts = 3            # or `max`: the attribute takes both too
//! initial = "100ms"
//! multiplier = 2.0
//! max_interval = "2s"
//! jitter = 0.25              # the amount of the site's kind (±25 %), or a
//!                             # kind: "symmetric 0.3", "additive 0.3",
//!                             # "full", "decorrelated"
//! max_elapsed = "5s"
//! attempt_timeout = "800ms"
//! max_retry_after = "60s"     # the longest `Retry-After` pause honoured
//!
//! [budgets.user]              # the retry budget of every chain to `user`
//! ratio = 0.2                 # retries: 20 % of the calls …
//! min_per_second = 10         # … plus 10 per second …
//! ttl = "10s"                 # … over the last 10 s
//! ```
//!
//! The keys are the attributes' arguments, with the same meaning: a
//! setting moves from the code to the file unchanged.
//!
//! `jitter` reads the attribute's vocabulary (`#[retry]`'s "Jitter"
//! section). A bare number sets the amount of the site's own kind and never
//! changes the kind: `jitter = 0.3` over a `preset = "db_tx"` site keeps its
//! additive jitter (`Jitter::Additive(0.3)`, up to +30 %), over an HTTP
//! site it is ±30 %, and over a site whose jitter is `Full` or
//! `Decorrelated` (no amount) it is an error when the registry is built.
//! To change the kind, name it: `jitter = "symmetric 0.3"`, `"full"`.
//! An amount is between 0.1 and 1.0; `0` and `"none"` are refused.
//!
//! Unknown keys, wrong types and out-of-range values are errors naming the
//! file, the key and the value; nothing falls back to a default silently.
//! Each `[breakers.*]` and `[retry.*]` section is checked on its own, over
//! the [guide's](crate::guide) defaults, when the file is loaded, and every
//! mistake of the file is reported at once ([`ConfigError::errors`]).
//!
//! # Every name is known at startup
//!
//! Each `#[retry]` and `#[circuit_breaker]` registers its site at link
//! time (a `static` the linker gathers: nothing runs at startup, no call
//! pays for it), so [`install`] refuses a section that names no site, with
//! the nearest name when there is one: `[retry.user]` for a breaker
//! `user` whose policy is `user.get` is an error, not a setting silently
//! not in force. A `#[retry]` without `name` is `module::fn`, or
//! `module::Type::fn` in an impl. An attribute sees its fn but not the
//! impl around it, so for a method `install` checks the module and the fn,
//! and the method's first call checks the type: a section whose type is a
//! near miss of the method's (`Userz` for `Users`), when the method has no
//! section of its own, is logged at ERROR with the name to use. A
//! `[budgets.<name>]` section must be
//! the budget some `#[retry]` draws on (its `budget = ".."`, or the name of
//! its `#[circuit_breaker]`). Names used only by hand are declared in
//! the builder ([`RegistryBuilder::breaker`], [`RegistryBuilder::policy`],
//! [`RegistryBuilder::budget`], [`RegistryBuilder::on_state_change`]). [`Registry::sites`] lists every
//! site with the configuration it runs with; [`Registry::find_breaker`]
//! looks a breaker up without bringing a configuration of its own.
//!
//! The link-time list is the `site-list` cargo feature, on by default,
//! and needs linker support: Linux, macOS, Windows, FreeBSD, OpenBSD,
//! illumos (and Android, iOS). Without it (the feature off, or elsewhere)
//! the registry learns each site at its first call: the section names are
//! not checked (one WARN at [`install`] says so), a section over a site's
//! values is checked at that site's first call (an invalid pair is an
//! ERROR, the site running on its attribute's values), [`Registry::sites`]
//! lists the sites that have run, and the first rule below holds only for
//! a name given whole in code, or whose sites (and layers) come to the
//! same settings once the file is laid over them.
//!
//! # Rules
//!
//! - **One configuration per name, whatever runs first.** Every
//!   `#[circuit_breaker]` site is known when the registry is built, so the
//!   configuration of each name is resolved then (the file over the code
//!   over the attributes), and the breaker is the same whichever of a site,
//!   a layer (`ResilienceLayer::named`,
//!   `ResilienceMiddleware::named`) or [`Registry::find_breaker`] creates
//!   it. Two sites of one name with different settings are refused when
//!   the registry is built ([`install`], or the first call), the error
//!   naming both sites and the settings that differ: make them agree, or
//!   set the name once in the config file or in code. Only a name that no
//!   site and no code configures is created with the values of its first
//!   caller ([`Registry::breaker`]), and a later caller with other values
//!   gets a WARN. Without the link-time list, the first of the sites (or
//!   layer) to run configures the name, and each later site whose settings
//!   would run differently is an ERROR naming the name, both sites and
//!   both values; its calls go through the same breaker.
//! - **Every combination is checked before the first call.** The file's
//!   sections, the code and the attributes' values are combined and
//!   checked when the registry is built: a `[breakers.x] window_calls = 30`
//!   over `#[circuit_breaker(name = "x", min = 50)]` is an error then, not
//!   a section dropped at the first call.
//! - **A breaker's configuration is fixed once it exists.**
//!   [`Registry::reconfigure`] refuses a breaker already created (a call
//!   went through it) with an error; before that it applies. Swapping the
//!   thresholds of a breaker under calls in flight would need the closed
//!   path to read them through a lock or a pointer; restarting the service
//!   with a new file is the supported way.
//!
//! # Example
//!
//! ```
//! use resilience::breaker::BreakerConfig;
//! use resilience::registry::Registry;
//!
//! let registry = Registry::builder()
//!     .service("checkout")
//!     .config_str("[breakers.user]\nratio = 0.3\nmin = 10\n", "inline")?
//!     .build()?;
//! let user = registry.breaker("user", BreakerConfig::new().with_min_requests(50));
//! assert_eq!(user.config().failure_ratio(), 0.3); // the file wins
//! assert_eq!(user.config().min_requests(), 10);
//! assert!(std::ptr::eq(user, registry.breaker("user", BreakerConfig::new())));
//! # Ok::<(), resilience::ConfigError>(())
//! ```

mod duration;
#[cfg(feature = "config-file")]
mod file;
#[cfg(not(feature = "config-file"))]
mod no_file;
mod sites;

use std::collections::HashMap;
use std::fmt;
#[cfg(feature = "config-file")]
use std::path::Path;
use std::sync::{OnceLock, RwLock};

use resilience_rules::suggest::did_you_mean;

use crate::breaker::{BreakerConfig, BreakerFamily, CircuitBreaker, FamilyConfig};
use crate::error::ConfigError;
use crate::retry::{Budget, BudgetConfig, Policy, PolicyBuilder};

#[cfg(feature = "config-file")]
use self::file::FileConfig;
#[cfg(not(feature = "config-file"))]
use self::no_file::FileConfig;
pub(crate) use self::sites::ran as site_ran;
#[doc(hidden)]
pub use self::sites::{Defaults, SITES, Site, SiteDefaults};
pub use self::sites::{SiteConfig, SiteInfo};

/// A state-change hook, as given to [`RegistryBuilder::on_state_change`].
type Hook = std::sync::Arc<
    dyn Fn(&'static str, crate::breaker::State, crate::breaker::State) + Send + Sync,
>;

/// The environment variable naming the config file read by
/// [`RegistryBuilder::from_env`] and by [`global()`].
pub const CONFIG_ENV: &str = "RESILIENCE_CONFIG";

/// The `service` label when none is configured (OpenTelemetry's default).
pub const UNKNOWN_SERVICE: &str = crate::telemetry::UNKNOWN_SERVICE;

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

/// The site `module::fn` a `[retry."module::Type::fn"]` section names, the
/// type left out: the type of a method's impl is known only once it runs.
fn method_section(section: &str) -> Option<&'static str> {
    let (path, function) = section.rsplit_once("::")?;
    let (module, _ty) = path.rsplit_once("::")?;
    let name = format!("{module}::{function}");
    sites::known()
        .map(|site| site.name)
        .find(|site| *site == name)
}

/// `name` as a TOML key: bare when it can be, quoted otherwise (a name
/// with `::` or `.`).
pub(crate) fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// Named breakers and retry policies; see the [module docs](self).
pub struct Registry {
    /// Leaked once per registry: the label outlives every breaker, which
    /// are `'static` too.
    service: &'static str,
    file: FileConfig,
    /// The attributes' configuration of each breaker and family name,
    /// resolved once when the registry is built.
    declared: Declared,
    state: RwLock<Shared>,
}

/// What the `#[circuit_breaker]` sites linked into the program declare, one
/// configuration per name: every site is known at link time, so a breaker
/// is configured the same whichever site, layer or lookup creates it first.
#[derive(Debug, Default)]
struct Declared {
    breakers: HashMap<&'static str, BreakerConfig>,
    families: HashMap<&'static str, FamilyConfig>,
}

impl Declared {
    /// One configuration per name from the linked sites; two sites of one
    /// name that disagree are an error naming both and the settings that
    /// differ, unless the code gives that name a whole configuration of
    /// its own (the attributes' values are then not used).
    fn resolve(shared: &Shared) -> Result<Declared, ConfigError> {
        type Seen<C> = HashMap<&'static str, (C, Option<&'static std::panic::Location<'static>>)>;
        let mut breakers: Seen<BreakerConfig> = HashMap::new();
        let mut families: Seen<FamilyConfig> = HashMap::new();
        let mut errors = Vec::new();
        let mut sites: Vec<SiteDefaults> = sites::linked().collect();
        // A stable order, for the same error from one run to the next.
        sites.sort_by_key(|site| site.at.map(|at| (at.file(), at.line(), at.column())));
        for site in sites {
            let (first, config) = match site.config {
                Defaults::Breaker(config) => {
                    if shared.code_breakers.contains_key(site.name) {
                        continue;
                    }
                    match breakers.get(site.name) {
                        None => {
                            breakers.insert(site.name, (config, site.at));
                            continue;
                        }
                        Some(&(first, at)) if first != config => (at, differences(&first, &config)),
                        Some(_) => continue,
                    }
                }
                Defaults::Family(config) => {
                    if shared.code_families.contains_key(site.name) {
                        continue;
                    }
                    match families.get(site.name) {
                        None => {
                            families.insert(site.name, (config, site.at));
                            continue;
                        }
                        Some(&(first, at)) if first != config => {
                            (at, family_differences(&first, &config))
                        }
                        Some(_) => continue,
                    }
                }
                Defaults::Retry(_) => continue,
            };
            let place = |at: Option<&std::panic::Location<'_>>| {
                at.map_or_else(|| "a site".to_owned(), |at| format!("the site at {at}"))
            };
            errors.push(ConfigError::new(
                format!("circuit breaker `{}`", site.name),
                "attributes",
                config.join(", "),
                format!(
                    "{} and {} both write `#[circuit_breaker(name = \"{}\")]` with other settings, so the breaker would run with the settings of whichever is called first; give both the same settings, or set them once in the config file (`[breakers.{}]`) or in code (`RegistryBuilder::breaker`)",
                    place(first),
                    place(site.at),
                    site.name,
                    toml_key(site.name),
                ),
            ));
        }
        if let Some(err) = ConfigError::combine(errors) {
            return Err(err);
        }
        Ok(Declared {
            breakers: breakers.into_iter().map(|(k, (c, _))| (k, c)).collect(),
            families: families.into_iter().map(|(k, (c, _))| (k, c)).collect(),
        })
    }
}

/// Reports, at ERROR, the site at `at` whose settings for the breaker (or
/// family) `name` are not in force because `first` created it before the
/// site ran: possible only without the link-time list of sites, which
/// resolves every name before the first call. An error, not a panic: the
/// call still runs, with the breaker every other caller of the name shares.
fn site_conflict(
    kind: &str,
    name: &str,
    first: &str,
    at: &std::panic::Location<'_>,
    differ: &[String],
    in_code: &str,
) {
    let differ = differ.join(", ");
    tracing::error!(
        breaker = name,
        site = %at,
        first = %first,
        differ = %differ,
        "{kind} `{name}` runs with the settings of {first}; the `#[circuit_breaker]` site at {at} declares others, not in force (in force, then this site's: {differ}). Without the link-time list of sites (the `site-list` cargo feature, off in this build or not supported by its target) a site's settings are known only once it runs, so the first to run configures the name: give every site of `{name}` the same settings, or set them once in the config file (`[breakers.{key}]`) or in code (`{in_code}`)",
        key = toml_key(name),
    );
}

/// [`differences`] of two families, with their own settings.
fn family_differences(a: &FamilyConfig, b: &FamilyConfig) -> Vec<String> {
    let mut differ = differences(a.breaker(), b.breaker());
    if a.max_members() != b.max_members() {
        differ.push(format!(
            "`max_members` {} and {}",
            a.max_members(),
            b.max_members()
        ));
    }
    if a.idle() != b.idle() {
        differ.push(format!("`idle` {:?} and {:?}", a.idle(), b.idle()));
    }
    if differ.is_empty() {
        differ.push(format!("{a:?} and {b:?}"));
    }
    differ
}

/// The settings in which `a` and `b` differ, in the attributes' words:
/// "`cooldown` 2s and 30s".
fn differences(a: &BreakerConfig, b: &BreakerConfig) -> Vec<String> {
    let mut differ = Vec::new();
    let mut check = |key: &str, a: String, b: String| {
        if a != b {
            differ.push(format!("`{key}` {a} and {b}"));
        }
    };
    check(
        "min",
        a.min_requests().to_string(),
        b.min_requests().to_string(),
    );
    check(
        "ratio",
        a.failure_ratio().to_string(),
        b.failure_ratio().to_string(),
    );
    check(
        "window",
        format!("{:?}", a.window()),
        format!("{:?}", b.window()),
    );
    check(
        "cooldown",
        format!("{:?}", a.cooldown()),
        format!("{:?}", b.cooldown()),
    );
    check(
        "half_open",
        a.half_open().to_string(),
        b.half_open().to_string(),
    );
    check(
        "probe_timeout",
        format!("{:?}", a.probe_timeout()),
        format!("{:?}", b.probe_timeout()),
    );
    check(
        "call_timeout",
        format!("{:?}", a.call_timeout()),
        format!("{:?}", b.call_timeout()),
    );
    check(
        "slow_call",
        format!("{:?}", a.slow_call()),
        format!("{:?}", b.slow_call()),
    );
    check(
        "shared",
        format!("{:?}", a.sharing()),
        format!("{:?}", b.sharing()),
    );
    if differ.is_empty() {
        // A setting not named above: show both whole.
        differ.push(format!("{a:?} and {b:?}"));
    }
    differ
}

#[derive(Default)]
struct Shared {
    /// Whole configurations given by the code, per name.
    code_breakers: HashMap<String, BreakerConfig>,
    code_policies: HashMap<String, Policy>,
    /// Hooks to attach to a breaker when it is created, by name.
    hooks: HashMap<String, Vec<Hook>>,
    code_budgets: HashMap<String, BudgetConfig>,
    live: HashMap<&'static str, Live>,
    code_families: HashMap<String, FamilyConfig>,
    families: HashMap<&'static str, LiveFamily>,
    budgets: HashMap<String, &'static Budget>,
    code_limits: HashMap<String, crate::limit::LimitConfig>,
    limiters: HashMap<String, std::sync::Arc<crate::limit::Limiter>>,
}

/// A breaker of the registry. Two words: what only a conflict between
/// call sites needs is boxed, so that a registry of 10,000 breakers keeps
/// each within 512 bytes of heap, its place in the table included.
struct Live {
    breaker: &'static CircuitBreaker,
    seen: Option<Box<Seen>>,
}

/// What a breaker's registrations gave, where it is not the breaker's own
/// configuration.
#[derive(Default)]
struct Seen {
    /// The attribute values of the first registration, when the file or
    /// the code changed them.
    first: Option<BreakerConfig>,
    /// The values of later registrations already warned about.
    warned: Vec<BreakerConfig>,
}

/// A breaker family of the registry, and the attributes' values it was
/// created with (see [`Live`]): one per family name, not per member.
struct LiveFamily {
    family: &'static BreakerFamily,
    first: FamilyConfig,
}

/// Who asks the registry for a breaker or a family. Without the link-time
/// list of sites, whoever comes first configures it, and a later site
/// whose settings are then not in force is reported.
#[derive(Debug, Clone, Copy)]
enum Origin {
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
fn first_creator(name: &str, first: Defaults, at: &std::panic::Location<'_>) -> String {
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

impl Live {
    fn new(breaker: &'static CircuitBreaker, first: BreakerConfig) -> Live {
        let seen = (first != *breaker.config()).then(|| {
            Box::new(Seen {
                first: Some(first),
                warned: Vec::new(),
            })
        });
        Live { breaker, seen }
    }

    /// The attribute values of the first registration.
    fn first(&self) -> BreakerConfig {
        self.seen
            .as_ref()
            .and_then(|seen| seen.first)
            .unwrap_or(*self.breaker.config())
    }

    /// Whether a registration with `defaults` needs no warning: the first
    /// one's values, or values already warned about.
    fn knows(&self, defaults: &BreakerConfig) -> bool {
        self.first() == *defaults
            || self
                .seen
                .as_ref()
                .is_some_and(|seen| seen.warned.contains(defaults))
    }

    fn warned(&mut self, defaults: BreakerConfig) {
        self.seen.get_or_insert_default().warned.push(defaults);
    }
}

impl Registry {
    /// A builder with no file and no configuration in code.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

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

    fn breaker_from(
        &self,
        name: &'static str,
        defaults: BreakerConfig,
        origin: Origin,
    ) -> &'static CircuitBreaker {
        {
            let shared = self.read();
            if let Some(live) = shared.live.get(name)
                && match origin {
                    Origin::Site(_) => live.first() == defaults,
                    Origin::Layer => true,
                    Origin::Call => live.knows(&defaults),
                }
            {
                return live.breaker;
            }
        }
        let mut shared = self.write();
        if let Some(live) = shared.live.get(name)
            && let Origin::Site(at) = origin
        {
            let first = live.first();
            if first != defaults && !shared.code_breakers.contains_key(name) {
                // Only what would run differently is a conflict: the file
                // may set the very settings in which the sites differ.
                let in_force = *live.breaker.config();
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
            return live.breaker;
        }
        if let Some(live) = shared.live.get_mut(name) {
            if matches!(origin, Origin::Layer) {
                return live.breaker;
            }
            if !live.knows(&defaults) {
                tracing::warn!(
                    breaker = name,
                    first = ?live.first(),
                    ignored = ?defaults,
                    "two call sites configure circuit breaker `{name}` differently; the first registration wins (move the setting to the config file to make it explicit)"
                );
                live.warned(defaults);
            }
            return live.breaker;
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
        let mut live = Live::new(breaker, first);
        if first != defaults {
            live.warned(defaults);
        }
        shared.live.insert(name, live);
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

    fn resolve(
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

    fn family_from(
        &self,
        name: &'static str,
        defaults: FamilyConfig,
        origin: Origin,
    ) -> &'static BreakerFamily {
        if let Some(live) = self.read().families.get(name)
            && (live.first == defaults || !matches!(origin, Origin::Site(_)))
        {
            return live.family;
        }
        let mut shared = self.write();
        if let Some(live) = shared.families.get(name) {
            if let Origin::Site(at) = origin
                && live.first != defaults
                && !shared.code_families.contains_key(name)
            {
                let in_force = *live.family.config();
                let theirs = self.file.family(name, defaults);
                if in_force != theirs {
                    site_conflict(
                        "breaker family",
                        name,
                        &first_creator(name, Defaults::Family(live.first), at),
                        at,
                        &family_differences(&in_force, &theirs),
                        "RegistryBuilder::family",
                    );
                }
            }
            return live.family;
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
            LiveFamily {
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
            .map(|live| live.family)
            .collect()
    }

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
    fn misspelt_method_section(&self, listed: &str, name: &str) -> Option<&str> {
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
    fn policy_in(&self, shared: &Shared, name: &str, defaults: PolicyBuilder) -> Policy {
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
        if let Some(live) = self.read().live.get(name) {
            return Some(live.breaker);
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
                        let defaults = self
                            .declared
                            .breakers
                            .get(site.name)
                            .copied()
                            .unwrap_or(defaults);
                        let config = match shared.live.get(site.name) {
                            Some(live) => *live.breaker.config(),
                            None => {
                                let from_code = shared
                                    .code_breakers
                                    .get(site.name)
                                    .copied()
                                    .unwrap_or(defaults);
                                self.file.breaker(site.name, from_code)
                            }
                        };
                        SiteConfig::Breaker(config)
                    }
                    Defaults::Family(defaults) => {
                        if !seen.insert(site.name) {
                            return None;
                        }
                        let defaults = self
                            .declared
                            .families
                            .get(site.name)
                            .copied()
                            .unwrap_or(defaults);
                        let config = match shared.families.get(site.name) {
                            Some(live) => *live.family.config(),
                            None => {
                                let from_code = shared
                                    .code_families
                                    .get(site.name)
                                    .copied()
                                    .unwrap_or(defaults);
                                self.file.family(site.name, from_code)
                            }
                        };
                        SiteConfig::Family(config)
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
    fn check_combinations(&self) -> Result<(), ConfigError> {
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
    fn check_sites(&self) -> Result<(), ConfigError> {
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
    /// else the code's [`RegistryBuilder::limit`]; `None` when neither
    /// configures it. The HTTP layers built [`from_registry`](crate::tower::ResilienceLayer)
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

    fn limiter_or(
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

    /// The service this process is, for the `service` label of metrics.
    pub fn service(&self) -> &'static str {
        self.service
    }

    /// Replaces the configuration of the breaker `name` before its first
    /// use; refused once the breaker exists (see the [module docs](self)).
    /// The config file still wins over it.
    pub fn reconfigure(&self, name: &str, config: BreakerConfig) -> Result<(), ConfigError> {
        config
            .validate()
            .map_err(|err| err.with_subject(format!("circuit breaker `{name}`")))?;
        let mut shared = self.write();
        if shared.live.contains_key(name) {
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
        self.read().live.values().map(|live| live.breaker).collect()
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
        let mut names: Vec<_> = shared.live.keys().collect();
        names.sort();
        f.debug_struct("Registry")
            .field("service", &self.service)
            .field("file", &self.file.origin())
            .field("breakers", &names)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Registry`] from code and from a config file.
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `build` or `install` is called"]
pub struct RegistryBuilder {
    service: Option<String>,
    file: Option<FileConfig>,
    shared: Shared,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("code_breakers", &self.code_breakers)
            .field("code_policies", &self.code_policies)
            .finish_non_exhaustive()
    }
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
        let declared = Declared::resolve(&self.shared)?;
        let registry = self.build_lenient(declared);
        registry.check_combinations()?;
        Ok(registry)
    }

    /// [`build`](Self::build), then the check of [`install`].
    fn build_checked(self) -> Result<Registry, ConfigError> {
        let registry = self.build()?;
        registry.check_sites()?;
        Ok(registry)
    }

    fn build_lenient(self, declared: Declared) -> Registry {
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

// Most of them lay a file over the code.
#[cfg(all(test, feature = "config-file"))]
mod tests;
