//! `redquorum release RESOURCE --token T [--rw | -n N]`: an operator's
//! compare-and-delete on every node.

use redquorum::{Answer, LockError, Redlock, Retry};

use crate::cli::{Global, ReleaseArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

pub async fn release(global: &Global, nodes: &[String], args: &ReleaseArgs, ui: &Ui) -> Code {
    let redlock = match crate::connect(global, nodes, Retry::none()).await {
        Ok(redlock) => redlock,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let code = release_with(&redlock, args, ui).await;
    redlock.shutdown().await;
    code
}

async fn release_with(redlock: &Redlock, args: &ReleaseArgs, ui: &Ui) -> Code {
    let resource = args.resource.as_str();
    let released = match args.permits {
        Some(permits) => match redlock.semaphore(resource, permits) {
            Ok(semaphore) => semaphore.release_token(&args.token).await,
            Err(e) => Err(LockError::Input(e)),
        },
        None if args.rw => redlock.release_token_rw(resource, &args.token).await,
        None => redlock.release_token(resource, &args.token).await,
    };
    match released {
        Ok(votes) => {
            for (node, answer) in votes.iter() {
                let what = match answer {
                    Answer::Yes => "released".to_owned(),
                    Answer::NotHeld => "not held by this token".to_owned(),
                    Answer::Failed(e) => format!("failed: {e}"),
                    other => format!("{other:?}"),
                };
                tracing::info!(node, what, "release");
            }
            let released = votes.yes();
            if released == 0 {
                let hint = match (args.permits, args.rw) {
                    (None, false) => " (a read/write lock's token needs --rw, a permit's -n N)",
                    _ => "",
                };
                ui.note(format_args!(
                    "{resource} was not held by this token on any node that answered \
                     ({} of {}); nothing released{hint}",
                    votes.not_held(),
                    votes.len()
                ));
                return exit::NOTHING_RELEASED;
            } else {
                ui.out(format_args!(
                    "released {resource} on {released} of {} nodes ({} not held by this token, \
                     {} failed)",
                    votes.len(),
                    votes.not_held(),
                    votes.failed()
                ));
            }
            0
        }
        Err(LockError::Input(e)) => {
            ui.usage(&e.to_string());
            exit::USAGE
        }
        Err(LockError::Unavailable { votes }) => {
            ui.error(format_args!(
                "too few nodes confirmed the release of {resource}: {votes}"
            ));
            exit::UNAVAILABLE
        }
        Err(e) => {
            ui.error(format_args!("cannot release {resource}: {e}"));
            exit::SOFTWARE
        }
    }
}
