//! A run's history: one line per event, appended by every process of the
//! run to one file.
//!
//! A line is `T PROC EVENT key=value ...`: `T` nanoseconds of the
//! machine's monotonic clock (`CLOCK_MONOTONIC`, one clock for every
//! process of the run), `PROC` who wrote it (`c3` a client process,
//! `nemesis`, `run`), then the event and its fields. Values hold no
//! spaces. Each line goes out in one `write(2)` on a file opened with
//! `O_APPEND`, so lines of several processes never interleave.
//!
//! The events (fields in brackets are optional):
//!
//! | event      | fields                                                   | meaning |
//! |------------|----------------------------------------------------------|---------|
//! | `invoke`   | `task kind`                                              | a task begins an operation of that kind |
//! | `grant`    | `id task kind res holder until [fence] [limit]`          | an acquire returned a lock, valid until `until` |
//! | `until`    | `id until`                                               | the hold's validity now ends at `until` (extended) |
//! | `end`      | `id`                                                     | the holder stops acting on it (release begins) |
//! | `released` | `id ok`                                                  | the release returned: `1`, or `0:ERROR` (its outcome unknown: it is sent again, the keys left are checked after the run) |
//! | `fail`     | `task kind res err`                                      | an acquire was refused by the nodes' answers (`Taken`, `Timeout`, bad input) |
//! | `unknown`  | `task kind res err`                                      | an acquire whose outcome on the nodes is unknown (`Unavailable`, `Expired`, `Busy`): never acted on, taken back in the background |
//! | `write`    | `id res fence seq accepted`                              | a write to the fenced store, and its verdict |
//! | `fault`    | `name target phase`                                      | the nemesis began (`begin`) or ended (`end`) a fault; a clock jump has taken effect at `stepped` |
//! | `left`     | `node key pttl`                                          | a key with a TTL found after the run |
//! | `link`     | `what [node] [error] ...`                                | the library's transport logged a connection event (`crate::link_log`) |
//! | `note`     | anything                                                 | free text for the reader |

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Now on the monotonic clock every process of a run shares, in
/// nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists
    // on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `instant` on the shared monotonic clock. `std::time::Instant` reads
/// `CLOCK_MONOTONIC` on Linux, so the offset between the two is the time
/// between two reads: nanoseconds.
pub fn instant_ns(instant: Instant) -> u64 {
    let (now_i, now_m) = (Instant::now(), mono_ns());
    if instant >= now_i {
        now_m + (instant - now_i).as_nanos() as u64
    } else {
        now_m.saturating_sub((now_i - instant).as_nanos() as u64)
    }
}

/// A history file open for appending, shared by the tasks of one process.
#[derive(Debug)]
pub struct Recorder {
    file: std::sync::Mutex<File>,
    proc: String,
}

impl Recorder {
    /// Appends to `path` (created if absent) as `proc`.
    pub fn open(path: &Path, proc: &str) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            file: std::sync::Mutex::new(file),
            proc: proc.to_owned(),
        })
    }

    /// Records `event` with `fields`, stamped now.
    pub fn record(&self, event: &str, fields: &[(&str, String)]) {
        self.record_at(mono_ns(), event, fields);
    }

    /// Records `event` with `fields`, stamped `t`.
    pub fn record_at(&self, t: u64, event: &str, fields: &[(&str, String)]) {
        let mut line = format!("{t} {} {event}", self.proc);
        for (k, v) in fields {
            debug_assert!(!v.contains(char::is_whitespace), "{k}={v:?}");
            line.push(' ');
            line.push_str(k);
            line.push('=');
            line.push_str(v);
        }
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // One write(2) per line: O_APPEND keeps lines whole across processes.
        // A history that cannot be written is a broken run: say so.
        if let Err(e) = file.write_all(line.as_bytes()) {
            eprintln!("chaos: cannot append to the history: {e}");
            std::process::exit(3);
        }
    }
}

/// One line of a history, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Monotonic nanoseconds.
    pub t: u64,
    /// Who wrote it.
    pub proc: String,
    /// What happened.
    pub event: String,
    /// Its fields.
    pub fields: BTreeMap<String, String>,
}

impl Line {
    /// Parses one line; `None` for a line that is not an event (blank, or
    /// cut short by a process killed mid-write).
    pub fn parse(text: &str) -> Option<Line> {
        let mut words = text.split_whitespace();
        let t = words.next()?.parse().ok()?;
        let proc = words.next()?.to_owned();
        let event = words.next()?.to_owned();
        let mut fields = BTreeMap::new();
        for word in words {
            let (k, v) = word.split_once('=')?;
            fields.insert(k.to_owned(), v.to_owned());
        }
        Some(Line {
            t,
            proc,
            event,
            fields,
        })
    }

    /// Field `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// Field `key` as a number, if present and numeric.
    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_line_parses_back() {
        let dir = std::env::temp_dir().join(format!("chaos-history-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let rec = Recorder::open(&dir, "c1").unwrap();
        rec.record_at(42, "grant", &[("id", "c1-7".into()), ("res", "a,b".into())]);
        let text = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let line = Line::parse(text.trim_end()).unwrap();
        assert_eq!((line.t, line.proc.as_str()), (42, "c1"));
        assert_eq!(line.event, "grant");
        assert_eq!(line.get("res"), Some("a,b"));
        assert_eq!(Line::parse("17 c1"), None);
        assert_eq!(Line::parse("x c1 grant"), None);
    }

    #[test]
    fn an_instant_maps_onto_the_monotonic_clock() {
        let later = Instant::now() + std::time::Duration::from_secs(2);
        let ns = instant_ns(later);
        let now = mono_ns();
        // Two seconds ahead, within a millisecond of scheduling noise.
        assert!(
            ns > now + 1_990_000_000 && ns <= now + 2_000_000_000,
            "{ns} {now}"
        );
    }
}
