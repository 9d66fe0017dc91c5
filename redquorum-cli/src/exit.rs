//! Exit codes (sysexits.h where one fits; see docs/cli.md).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// A process exit code.
pub type Code = u8;

/// Bad usage or configuration (EX_USAGE).
pub const USAGE: Code = 64;
/// `release`: the token held the lock on no node that answered
/// (EX_DATAERR).
pub const NOTHING_RELEASED: Code = 65;
/// Too few nodes answered to decide (EX_UNAVAILABLE).
pub const UNAVAILABLE: Code = 69;
/// An internal error (EX_SOFTWARE).
pub const SOFTWARE: Code = 70;
/// The runtime or signal handling could not be set up (EX_OSERR).
pub const OSERR: Code = 71;
/// The lock was not had in time (EX_TEMPFAIL): try again later.
pub const TEMPFAIL: Code = 75;
/// A node rejected the credentials (EX_NOPERM).
pub const NOPERM: Code = 77;
/// The lease was lost (or about to be) and the command was stopped.
pub const LOST: Code = 79;
/// The command was found but could not be run (as shells do).
pub const CANNOT_EXECUTE: Code = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: Code = 127;

/// `128 + signo`, as shells report a death by signal.
pub fn signalled(signo: i32) -> Code {
    Code::try_from(128 + signo.clamp(0, 127)).unwrap_or(255)
}

/// The code a shell would report for a child's exit status.
pub fn of_status(status: ExitStatus) -> Code {
    match (status.code(), status.signal()) {
        (Some(code), _) => Code::try_from(code & 0xff).unwrap_or(255),
        (None, Some(signo)) => signalled(signo),
        (None, None) => SOFTWARE,
    }
}
