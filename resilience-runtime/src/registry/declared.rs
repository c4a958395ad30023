//! What the attributes declare, one configuration per name, and the
//! words of a conflict between two sites.

use super::*;

/// What the `#[circuit_breaker]` sites linked into the program declare, one
/// configuration per name: every site is known at link time, so a breaker
/// is configured the same whichever site, layer or lookup creates it first.
#[derive(Debug, Default)]
pub(super) struct SiteDeclarations {
    pub(super) breakers: HashMap<&'static str, BreakerConfig>,
    pub(super) families: HashMap<&'static str, FamilyConfig>,
    /// The rate limit the sites of each limiter name declare (`limit =
    /// "<name>", rate = "100/s"`), one per name.
    pub(super) limits: HashMap<&'static str, LimitRate>,
}

impl SiteDeclarations {
    /// One configuration per name from the linked sites; two sites of one
    /// name that disagree are an error naming both and the settings that
    /// differ, unless the code gives that name a whole configuration of
    /// its own (the attributes' values are then not used).
    pub(super) fn resolve(shared: &Shared) -> Result<SiteDeclarations, ConfigError> {
        type FirstSites<C> =
            HashMap<&'static str, (C, Option<&'static std::panic::Location<'static>>)>;
        let mut breakers: FirstSites<BreakerConfig> = HashMap::new();
        let mut families: FirstSites<FamilyConfig> = HashMap::new();
        let mut errors = Vec::new();
        let mut sites: Vec<SiteDefaults> = sites::linked().collect();
        // A stable order, for the same error from one run to the next.
        sites.sort_by_key(|site| site.at.map(|at| (at.file(), at.line(), at.column())));
        for site in &sites {
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
        let limits = declared_limits(shared, &sites, &mut errors);
        if let Some(err) = ConfigError::combine(errors) {
            return Err(err);
        }
        Ok(SiteDeclarations {
            breakers: breakers.into_iter().map(|(k, (c, _))| (k, c)).collect(),
            families: families.into_iter().map(|(k, (c, _))| (k, c)).collect(),
            limits,
        })
    }
}

/// The rate limit each limiter name's sites declare, one per name: two
/// sites of one limiter with other rates (or bursts) are an error naming
/// both sites and both values, unless the code configures that limiter
/// whole (`RegistryBuilder::limit`: the attributes' rates are then not
/// used). A site that names the limiter without a `rate` declares
/// nothing, and runs through the limiter the others declare.
fn declared_limits(
    shared: &Shared,
    sites: &[SiteDefaults],
    errors: &mut Vec<ConfigError>,
) -> HashMap<&'static str, LimitRate> {
    let mut declaring: Vec<(&'static str, LimitRate)> = sites
        .iter()
        .filter_map(|site| Some((site.limit?, site.limit_rate?)))
        .filter(|(name, _)| !shared.code_limits.contains_key(*name))
        .collect();
    // Where each is written: the same error from one run to the next.
    declaring.sort_by_key(|(_, rate)| (rate.at().file(), rate.at().line(), rate.at().column()));
    let mut limits: HashMap<&'static str, LimitRate> = HashMap::new();
    for (name, rate) in declaring {
        match limits.get(name) {
            None => {
                limits.insert(name, rate);
            }
            Some(first) if !first.same(&rate) => errors.push(ConfigError::new(
                format!("load limit `{name}`"),
                "rate",
                format!("{first} and {rate}"),
                format!(
                    "the site at {} declares {first} and the site at {} declares {rate} for `limit = \"{name}\"`, so the limiter would keep whichever rate the first call brings; give both the same `rate` and `burst`, or set them once in the config file (`[limits.{}]`) or in code (`RegistryBuilder::limit`)",
                    first.at(),
                    rate.at(),
                    toml_key(name),
                ),
            )),
            Some(_) => {}
        }
    }
    limits
}

/// Reports, at ERROR, the site at `at` whose settings for the breaker (or
/// family) `name` are not in force because `first` created it before the
/// site ran: possible only without the link-time list of sites, which
/// resolves every name before the first call. An error, not a panic: the
/// call still runs, with the breaker every other caller of the name shares.
pub(super) fn site_conflict(
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
pub(super) fn family_differences(a: &FamilyConfig, b: &FamilyConfig) -> Vec<String> {
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
pub(super) fn differences(a: &BreakerConfig, b: &BreakerConfig) -> Vec<String> {
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

/// The site `module::fn` a `[retry."module::Type::fn"]` section names, the
/// type left out: the type of a method's impl is known only once it runs.
pub(super) fn method_section(section: &str) -> Option<&'static str> {
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
