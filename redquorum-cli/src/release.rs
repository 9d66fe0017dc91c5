//! `redquorum release RESOURCE --token T [--rw | -n N]`: an operator's
//! compare-and-delete on every node.

use redquorum::RwLock;
use redquorum::{Answer, LockError, Redlock, Retry, Semaphore};

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
    // The prefix `status` shows (`3b99b6b3…`) names the token it begins.
    let token = match whole_token(redlock, args).await {
        Ok(token) => token,
        Err(message) => {
            ui.usage(&message);
            return exit::USAGE;
        }
    };
    let released = match args.permits {
        Some(permits) => match Semaphore::new(redlock, resource, permits) {
            Ok(semaphore) => semaphore.release_token(&token).await,
            Err(e) => Err(LockError::Input(e)),
        },
        None if args.rw => match RwLock::new(redlock, resource) {
            Ok(rw) => rw.release_token(&token).await,
            Err(e) => Err(LockError::Input(e)),
        },
        None => redlock.release_token(resource, &token).await,
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

/// `--token` as given, or — where it is a prefix (as `status` shows it,
/// `…` and all) of exactly one token that holds the lock or a permit on
/// some node — that whole token. A prefix of several is refused, a prefix
/// of none left as given (nothing will match it).
async fn whole_token(redlock: &Redlock, args: &ReleaseArgs) -> Result<String, String> {
    let prefix = args.token.trim_end_matches('…');
    let tokens: Vec<String> = match (args.permits, args.rw) {
        (None, false) => match redlock.inspect(&args.resource).await {
            Ok(seen) => tokens(seen.nodes()),
            Err(_) => return Ok(args.token.clone()),
        },
        (Some(permits), _) => match Semaphore::new(redlock, &args.resource, permits) {
            Ok(semaphore) => match semaphore.inspect().await {
                Ok(seen) => seen
                    .slots()
                    .iter()
                    .flat_map(|s| tokens(s.nodes()))
                    .collect(),
                Err(_) => return Ok(args.token.clone()),
            },
            Err(_) => return Ok(args.token.clone()),
        },
        (None, true) => return Ok(args.token.clone()),
    };
    let mut matching: Vec<&String> = tokens.iter().filter(|t| t.starts_with(prefix)).collect();
    matching.sort();
    matching.dedup();
    match matching.as_slice() {
        [one] if one.as_str() != args.token => Ok((*one).clone()),
        [_, _, ..] => Err(format!(
            "--token {}: {} holders' tokens begin so; give more of it (status --show-token \
             shows them whole)",
            args.token,
            matching.len()
        )),
        _ => Ok(args.token.clone()),
    }
}

/// The tokens the nodes hold.
fn tokens(nodes: &[redquorum::inspect::NodeView<redquorum::inspect::Holding>]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| match n.read.as_ref().ok()?.holder.as_ref()? {
            redquorum::inspect::Holder::Token(token) => Some(token.clone()),
            _ => None,
        })
        .collect()
}
