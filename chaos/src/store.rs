//! The protected resource of a run: a fenced store in a file, shared by
//! every client process, one file per resource.
//!
//! A write carries the writer's fence. Under `flock(2)` the store reads
//! its highest accepted fence, refuses a write with a lower one (when
//! `fenced`) and numbers every write it sees (`seq`), so that the checker
//! can replay them in the store's own order. Open (not `fenced`), it takes
//! every write: the negative control of a paused holder writing unfenced.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A fenced store's directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    fenced: bool,
}

/// A write's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The store's number for the write.
    pub seq: u64,
    /// Whether it took it.
    pub accepted: bool,
}

impl Store {
    /// The store in `dir`; `fenced` false takes stale writes too.
    pub fn new(dir: &Path, fenced: bool) -> Store {
        Store {
            dir: dir.to_owned(),
            fenced,
        }
    }

    /// Writes to `resource`'s store with `fence`.
    pub fn write(&self, resource: &str, fence: u64) -> std::io::Result<Verdict> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(format!("store-{resource}")))?;
        // SAFETY: a valid, open descriptor; the lock goes with the file.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let mut words = text
            .split_whitespace()
            .map(|w| w.parse::<u64>().unwrap_or(0));
        let (seq, highest) = (words.next().unwrap_or(0) + 1, words.next().unwrap_or(0));
        let accepted = !self.fenced || fence >= highest;
        file.seek(SeekFrom::Start(0))?;
        file.set_len(0)?;
        write!(
            file,
            "{seq} {}",
            if accepted {
                highest.max(fence)
            } else {
                highest
            }
        )?;
        // Unlocked when `file` closes.
        Ok(Verdict { seq, accepted })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_store_refuses_a_lower_fence_and_an_open_one_does_not() {
        let dir = std::env::temp_dir().join(format!("chaos-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fenced = Store::new(&dir, true);
        assert_eq!(
            fenced.write("f", 8).unwrap(),
            Verdict {
                seq: 1,
                accepted: true
            }
        );
        assert_eq!(
            fenced.write("f", 7).unwrap(),
            Verdict {
                seq: 2,
                accepted: false
            }
        );
        assert_eq!(
            fenced.write("f", 8).unwrap(),
            Verdict {
                seq: 3,
                accepted: true
            }
        );
        let open = Store::new(&dir, false);
        assert_eq!(
            open.write("f", 1).unwrap(),
            Verdict {
                seq: 4,
                accepted: true
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
