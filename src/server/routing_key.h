// Prefix affinity: the key a load balancer hashes on, so that requests sharing a prefix
// reach the replica that has it cached (every replica recomputing every prefix would make
// the prefix cache worth nothing).
//
// The key, from the first of these a request has:
//   1. the X-Session-Id header        (a conversation, a tenant: the client says what belongs together)
//   2. the body's "user"              (OpenAI's end-user id)
//   3. the body's "cache_salt"        (requests that may share cache blocks at all)
//   4. the first block of the prompt's token ids (kRoutingBlockTokens; fewer if shorter)
// is "<source>-<16 hex digits>", the hex a 64-bit FNV-1a hash of the source and its value.
// lumen echoes it on every generation response (X-Routing-Key) and answers it without
// generating at POST /v1/routing_key. A balancer that cannot tokenize hashes 1-3 itself
// (deploy/haproxy.cfg); a client that sends the echoed key back as X-Session-Id keeps
// landing where its prefix is cached.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace lumen::server {

inline constexpr int32_t kRoutingBlockTokens = 16;  // the KV cache's block: what can be shared

std::string routing_key(std::string_view session_id, std::string_view user, std::string_view cache_salt,
                        std::span<const int32_t> prompt_ids);

}  // namespace lumen::server
