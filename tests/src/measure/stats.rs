//! Figures over runs and samples, and how the reports print numbers.

use serde::Serialize;

/// Median, min and max of a figure over runs (NaN, printed `-`, when there is none).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn stat(values: impl IntoIterator<Item = f64>) -> Stat {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    Stat {
        median: median_of_sorted(&v).unwrap_or(f64::NAN),
        min: v.first().copied().unwrap_or(f64::NAN),
        max: v.last().copied().unwrap_or(f64::NAN),
    }
}

/// The median (the mean of the middle two for an even count); `None` without values.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    median_of_sorted(&v)
}

fn median_of_sorted(v: &[f64]) -> Option<f64> {
    match v.len() {
        0 => None,
        len if len % 2 == 1 => Some(v[len / 2]),
        len => Some((v[len / 2 - 1] + v[len / 2]) / 2.0),
    }
}

/// Nearest-rank percentile of sorted values (0 without values).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Thousands separated, no decimals: 12,345 (`-` when not finite).
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_percentiles_and_thousands() {
        let s = stat([3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 10.0));
        assert!(stat([]).median.is_nan());
        assert_eq!(median([5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median([]), None);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(-1234.0), "-1,234");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(f64::NAN), "-");
    }
}
