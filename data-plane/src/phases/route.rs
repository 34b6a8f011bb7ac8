//! Route: the route of the request's model, the request prepared for members of another
//! protocol, and what selection must respect.

use http::HeaderMap;
use switchyard_engine::{MemberId, SelectionConstraint, Token};
use switchyard_provider::{ChatRequest, TranslateError};

use crate::context::Ctx;
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::request::{header_session_key, names, route_group};
use crate::wire;

/// Resolves the route, prepares the translation and sets the constraint; refuses a pin the key
/// may not make or cannot be read.
pub fn route(ctx: &mut Ctx<'_>) -> Result<(), GatewayError> {
    ctx.route = ctx.view.snapshot.resolve_route(&ctx.inspected.model);
    let unsupported_providers = translate(ctx);
    ctx.constraint = constraint(ctx, unsupported_providers)?;
    Ok(())
}

/// The request prepared for members of another protocol, when the route has any: the neutral
/// form in `ctx.chat`, what each protocol cannot express in `ctx.unsupported`, and the providers
/// that cannot serve it (returned, for selection).
///
/// Parsed for translation only, and only when the route has a member of another protocol (a
/// route whose members all speak the client's protocol passes the bytes through): a body the
/// parser refuses still routes (and passes through to same-protocol members untouched); other
/// protocols then cannot serve it. Members of another protocol that cannot express the request
/// (an endpoint with no translation, such as embeddings or responses, at all) are marked for
/// selection: they are skipped, and when nothing else is left the client gets a 400 naming
/// what it asked for.
fn translate(ctx: &mut Ctx<'_>) -> u8 {
    let endpoint = ctx.endpoint;
    let mixed = ctx
        .route
        .is_some_and(|r| ctx.view.route_needs_translation(r.id, endpoint));
    if !mixed {
        // No member of another protocol: nothing to mark (and nothing to format).
        return 0;
    }
    let (chat, unparsable) = match endpoint.translatable().then(|| parse(ctx)) {
        Some(Ok(chat)) => (Some(Box::new(chat)), None),
        Some(Err(message)) => (None, Some(message)),
        None => (None, None),
    };
    let (unsupported_providers, unsupported) =
        wire::unsupported(endpoint, chat.as_deref(), unparsable.as_deref());
    ctx.chat = chat;
    ctx.unsupported = unsupported;
    unsupported_providers
}

/// The translation made again for a body the guard phase rewrote: the neutral form, what each
/// protocol cannot express, and the providers selection must skip.
pub(super) fn translate_again(ctx: &mut Ctx<'_>) {
    ctx.constraint.needs.unsupported_providers = translate(ctx);
}

/// The request in neutral form, or why the parser refused it.
pub(super) fn parse(ctx: &Ctx<'_>) -> Result<ChatRequest, String> {
    let inspected = &ctx.inspected;
    let parsed = if ctx.endpoint == Endpoint::Responses {
        ChatRequest::parse_responses(&ctx.body, &inspected.model, inspected.stream)
    } else {
        ChatRequest::parse(
            ctx.endpoint.protocol(),
            &ctx.body,
            &inspected.model,
            inspected.stream,
        )
    };
    match parsed {
        Ok(mut chat) => {
            // The gateway keeps no responses: by default a translated answer says
            // `store: false`; the operator may have translation refuse such requests.
            if ctx.view.snapshot.settings.responses_refuse_store && chat.asks_to_store() {
                chat.keep_to_own_protocol("stored responses (`store`)");
            }
            Ok(chat)
        }
        Err(TranslateError::Malformed(message) | TranslateError::Unsupported(message)) => {
            Err(message)
        }
    }
}

/// What selection must respect: the key's route group (else the client's group header), its
/// team, the request's needs, a pinned member, and the sticky session's key when the route
/// keeps sessions sticky.
fn constraint(
    ctx: &Ctx<'_>,
    unsupported_providers: u8,
) -> Result<SelectionConstraint, GatewayError> {
    let (headers, token) = (&ctx.headers, ctx.token);
    let mut needs = ctx.inspected.needs;
    needs.unsupported_providers = unsupported_providers;
    let mut constraint = SelectionConstraint {
        route_group: route_group(token, headers),
        team: token.team_id,
        needs,
        ..SelectionConstraint::default()
    };
    constraint.pinned_member = pinned_member(headers, token)?;
    let settings = &ctx.view.snapshot.settings;
    let sticky_on = ctx
        .route
        .is_some_and(|r| r.sticky_session.unwrap_or(settings.sticky_enabled));
    if sticky_on && !constraint.is_pinned() {
        constraint.session_key = headers
            .get(&names::SESSION_ID)
            .and_then(|v| header_session_key(v.as_bytes()))
            .or_else(|| ctx.inspected.body_session(&ctx.body));
    }
    Ok(constraint)
}

/// The member the pin header names, for a key allowed to pin.
fn pinned_member(headers: &HeaderMap, token: &Token) -> Result<Option<MemberId>, GatewayError> {
    let Some(pin) = headers.get(&names::PIN) else {
        return Ok(None);
    };
    if !token.allow_pinning {
        return Err(GatewayError::PinningNotAllowed);
    }
    let member = pin
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or(GatewayError::InvalidPin)?;
    Ok(Some(member))
}
