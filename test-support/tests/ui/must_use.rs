// Each of these drops what it was given at once: a lock released, a permit
// given back, a builder or options that never took effect. Each warns.
#![deny(unused_must_use)]

use std::time::Duration;

use redquorum::{LockError, LockOptions, Redlock};

async fn misuse(redlock: &Redlock) -> Result<(), LockError> {
    redlock.lock("report", Duration::from_secs(10)).await?;
    redlock.try_lock("report", Duration::from_secs(10)).await?;
    let api = redlock.semaphore("api", 2)?;
    api.try_acquire(Duration::from_secs(10)).await?;
    redlock.lock("report", Duration::from_secs(10)).await?.keep_alive()?;
    Redlock::builder().nodes(["redis://127.0.0.1:7001"]);
    LockOptions::new().wait(Duration::from_secs(5));
    Ok(())
}

fn main() {
    let _ = misuse;
}
