//! HELP (RFC 1078): the service names, one per CRLF line, with no status line.
//! A handoff name is listed only while a backend serves it.

use std::borrow::Cow;

use crate::hub::Hub;
use crate::model::ServiceKind;
use crate::registry::{render_help, Registry};

/// The HELP answer for `registry` now.
pub(crate) fn answer<'a>(registry: &'a Registry, hub: &Hub) -> Cow<'a, [u8]> {
    if !registry.has_handoff() {
        return Cow::Borrowed(registry.help_text());
    }
    let live = registry.services().filter(|s| match s.kind {
        ServiceKind::Handoff(_) => hub.is_live(&s.name),
        _ => true,
    });
    Cow::Owned(render_help(live.map(|s| s.name.as_str())))
}
