package padlock

// ReleaseScriptSHA is the digest of the release script as padlock sends it
// (with lua/token.lua and lua/grant.lua in it), for tests that watch for it.
var ReleaseScriptSHA = releaseScript.Hash()

// ACLCommands are the commands Check probes.
func ACLCommands() []string { return aclCommands }
