//! "Did you mean" for near misses: argument and config keys, presets,
//! methods, units, the names of breakers and budgets.

/// The candidate nearest to `typo`, if it is near enough to be a typo: at
/// most one edit for short words, a third of the length for longer ones.
/// Case is ignored; a swap of two neighbours counts as one edit.
///
/// ```
/// use resilience_rules::suggest::did_you_mean;
///
/// let keys = ["max", "initial", "jitter"];
/// assert_eq!(did_you_mean("intial", keys), Some("initial"));
/// assert_eq!(did_you_mean("timeout", keys), None);
/// ```
pub fn did_you_mean<'a>(
    typo: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let typo = typo.to_ascii_lowercase();
    let limit = (typo.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|candidate| (distance(&typo, &candidate.to_ascii_lowercase()), candidate))
        .filter(|&(distance, _)| distance <= limit)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, counting a swap of two neighbours as one edit.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_misses_only() {
        let keys = ["max", "initial", "multiplier", "max_interval", "jitter"];
        assert_eq!(did_you_mean("maxx", keys), Some("max"));
        assert_eq!(did_you_mean("intial", keys), Some("initial"));
        assert_eq!(did_you_mean("jtiter", keys), Some("jitter"));
        assert_eq!(did_you_mean("multiplyer", keys), Some("multiplier"));
        assert_eq!(did_you_mean("Jitter", keys), Some("jitter"));
        assert_eq!(did_you_mean("timeout", keys), None);
    }
}
