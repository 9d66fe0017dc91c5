//! `redquorum release RESOURCE --token T`: an operator's compare-and-delete
//! on every node.

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
    match redlock.release_token(resource, &args.token).await {
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
                ui.out(format_args!(
                    "{resource} was not held by this token on any node that answered \
                     ({} of {}); nothing released",
                    votes.not_held(),
                    votes.len()
                ));
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
        Err(LockError::Config(e)) => {
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
