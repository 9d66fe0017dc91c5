//! The agreement's writes: the record where it is first created, a member
//! that lost its data adopted back, the addresses the members know — in
//! one batch at a time, each pass read back, at most [`MAX_PASSES`]
//! passes.

use super::*;

impl Agreement {
    /// Writes what is due, reads what the nodes then hold, and again, at
    /// most [`MAX_PASSES`] times; ends the batch.
    pub(super) async fn write(self: &Arc<Self>) {
        /// Ends the batch however `write` ends (a panic, a runtime gone).
        struct Ends<'a>(&'a Agreement);
        impl Drop for Ends<'_> {
            fn drop(&mut self) {
                self.0.lock().writing = false;
                self.0.ended.notify_waiters();
            }
        }
        let _ends = Ends(self);
        for _ in 0..MAX_PASSES {
            let plan = self.plan(&mut self.lock());
            if plan.is_empty() {
                break;
            }
            let Some(links) = self.links.get() else { break };
            let sent = Instant::now();
            let calls = plan.into_iter().filter_map(|(place, command)| {
                let link = links.get(place)?.upgrade()?;
                Some(async move {
                    let reply = tokio::time::timeout(self.timeout, link.query(command, None)).await;
                    (place, reply)
                })
            });
            for (place, reply) in futures::future::join_all(calls).await {
                if let Ok(Ok(frame)) = reply
                    && let Some(reading) = scripts::read_deployment(&frame)
                {
                    let mut state = self.lock();
                    self.stamp(place, sent);
                    state.readings[place] = Some(reading);
                    self.settle(&mut state);
                }
            }
        }
    }

    /// The writes due, by node: the record being created, on nodes without
    /// it; the record written back, under its member's id, on a known
    /// member that lost it (`Some`, with the id); the members' addresses
    /// (`None`), on holders that do not know them yet or know one as
    /// another member, once per node.
    ///
    /// A member is adopted back only where every other node of the client
    /// is accounted for — it answered as another member, or the holders
    /// know its address as another — so that no server this client can
    /// reach already is that member.
    pub(super) fn due<'s>(&self, state: &'s State) -> Vec<(usize, Option<Write<'s>>)> {
        let known = self.known(state);
        let mut due = Vec::new();
        for (place, reading) in state.readings.iter().enumerate() {
            let Some(reading) = reading else { continue };
            let write = match (&state.creating, &state.agreed, &reading.record) {
                (Some(record), None, None) => Some((record, None)),
                // A node behind (it missed a step of a change): forward.
                (_, Some(agreed), Some(held)) if held.epoch() < agreed.record.epoch() => {
                    Some((&agreed.record, None))
                }
                (_, Some(agreed), None) => match agreed.ids[place].as_deref() {
                    Some(id)
                        if agreed.adopt.contains(&place)
                            && deployment::accounted(&state.readings, &agreed.ids, place, id) =>
                    {
                        Some((&agreed.record, Some(id)))
                    }
                    _ => continue,
                },
                (_, Some(_), Some(_)) => {
                    // An address it does not know, or knows as another
                    // member (given to another server since).
                    let missing = known
                        .iter()
                        .any(|(name, id)| self.seen(reading, name) != Some(*id));
                    if !missing || !self.admits(place) || state.told[place] {
                        continue;
                    }
                    None
                }
                _ => continue,
            };
            due.push((place, write));
        }
        due
    }

    /// The commands of the writes due; the nodes told the members'
    /// addresses are marked so.
    fn plan(&self, state: &mut State) -> Vec<(usize, Vec<u8>)> {
        let (plan, told) = {
            let (due, known) = (self.due(state), self.known(state));
            let plan = due
                .iter()
                .filter_map(|(place, write)| {
                    let call = DeploymentCall {
                        id: &state.readings[*place].as_ref()?.id,
                        write: *write,
                        addresses: &self.names,
                        known: &known,
                    };
                    let mut command = Vec::new();
                    scripts::encode_deployment(
                        state.loaded[*place],
                        &self.key,
                        &call,
                        &mut command,
                    );
                    Some((*place, command))
                })
                .collect();
            let told: Vec<usize> = due
                .iter()
                .filter(|(_, w)| w.is_none())
                .map(|(p, _)| *p)
                .collect();
            (plan, told)
        };
        for place in told {
            state.told[place] = true;
        }
        plan
    }

    /// Each counted node's address and member id.
    fn known<'s>(&'s self, state: &'s State) -> Vec<(&'s str, &'s str)> {
        let Some(agreed) = &state.agreed else {
            return Vec::new();
        };
        self.names
            .iter()
            .zip(&agreed.ids)
            .enumerate()
            .filter(|(i, _)| self.admits(*i))
            .filter_map(|(_, (name, id))| Some((&**name, id.as_deref()?)))
            .collect()
    }

    /// The member `reading`'s node knows the address `name` to be.
    fn seen<'r>(&self, reading: &'r Reading, name: &str) -> Option<&'r str> {
        let at = self.names.iter().position(|n| &**n == name)?;
        reading.seen.get(at)?.as_deref()
    }
}
