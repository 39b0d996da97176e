//! What a benchmark reports about the machine and its own processes, read from `/proc` (Linux).

use std::path::Path;

/// Peak resident set size of this process in bytes (`VmHWM`), if `/proc` tells it.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kb("VmHWM:").map(|kb| kb * 1024)
}

/// Current resident set size of this process in bytes (`VmRSS`).
pub fn rss_bytes() -> Option<u64> {
    status_kb("VmRSS:").map(|kb| kb * 1024)
}

fn status_kb(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.trim_start_matches(key).trim().trim_end_matches("kB").trim().parse().ok()
}

/// Total length of the files under `path` (a file or a directory), following no symlinks.
pub fn apparent_bytes(path: &Path) -> std::io::Result<u64> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Ok(meta.len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        total += apparent_bytes(&entry?.path())?;
    }
    Ok(total)
}

/// One line describing the machine: CPU model and count, memory, kernel, load average.
pub fn describe() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} × {model}, {mem_gib:.0} GiB RAM, Linux {}, load average {}", kernel.trim(), load_average())
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The `q`-quantile (0 ≤ q ≤ 1, nearest rank) of `values`, NaN when empty.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((values.len().saturating_sub(1)) as f64 * q).round() as usize;
    values.get(rank).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_peak_at_least_its_current_size() {
        // The current size first: the peak, read after it, cannot be below it (other test
        // threads may grow the process in between).
        let now = rss_bytes().unwrap();
        let peak = peak_rss_bytes().unwrap();
        assert!(peak >= now && now > 0, "{peak} {now}");
    }

    #[test]
    fn apparent_bytes_sums_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/x"), [0u8; 100]).unwrap();
        std::fs::write(dir.path().join("y"), [0u8; 23]).unwrap();
        assert_eq!(apparent_bytes(dir.path()).unwrap(), 123);
        assert_eq!(apparent_bytes(&dir.path().join("y")).unwrap(), 23);
        assert!(apparent_bytes(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(quantile(&mut v, 0.5), 51.0);
        assert_eq!(quantile(&mut v, 0.99), 99.0);
        assert_eq!(quantile(&mut v, 1.0), 100.0);
        assert!(quantile(&mut [], 0.5).is_nan());
    }
}
