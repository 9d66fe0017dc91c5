//! `redquorum members change`: a change of members by joint quorums
//! (docs/agreement.md, "Changing members").

use redquorum::{ChangeError, MemberChange, Retry};

use crate::cli::{Global, MembersAction, MembersArgs};
use crate::exit::{self, Code};
use crate::ui::Ui;

pub async fn members(global: &Global, urls: &[String], args: &MembersArgs, ui: &Ui) -> Code {
    let MembersAction::Change(change) = &args.action;
    let to: Vec<String> = change
        .to
        .iter()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    let builders =
        crate::builder(global, urls, Retry::none(), global.node_timeout).and_then(|from| {
            Ok((
                from,
                crate::builder(global, &to, Retry::none(), global.node_timeout)?,
            ))
        });
    let (from, to) = match builders {
        Ok(builders) => builders,
        Err(e) => return crate::config_failure(ui, &e),
    };
    let declared = match MemberChange::declare(from, to).await {
        Ok(declared) => declared,
        Err(e) => return failure(ui, &e),
    };
    ui.out(format_args!(
        "declared: {}; joint quorums for {:?}",
        declared.record(),
        declared.ends_in()
    ));
    match declared.finish().await {
        Ok(done) => {
            ui.out(format_args!("done: the deployment is now {done}"));
            0
        }
        Err(e) => failure(ui, &e),
    }
}

fn failure(ui: &Ui, error: &ChangeError) -> Code {
    match error {
        ChangeError::Config(e) => crate::config_failure(ui, e),
        ChangeError::Unavailable { .. } => {
            ui.error(format_args!("{error}"));
            exit::UNAVAILABLE
        }
        _ => {
            ui.usage(&error.to_string());
            exit::USAGE
        }
    }
}
