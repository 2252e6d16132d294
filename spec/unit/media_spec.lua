-- The one place a response's Content-Type chooses its reader (src/wire/media.h): LIST,
-- WATCH and klua.api answers ask kl_media_of, and a type with no reader is refused by
-- each, naming it (spec/process/hostile_spec.lua). As client-go, only the media type
-- counts, not its parameters. Unlike client-go (rest.Request.transformResponse falls back to
-- the client's ContentType), a response without a Content-Type is not read: kube-apiserver
-- names the type of every body it writes, so such a body is not the API server's.
local testing = require('klua_testing')

describe('the reader of a response', function()
  it('is JSON framing and decoding for application/json, whatever its parameters and case', function()
    for _, ct in ipairs({ 'application/json', 'application/json; charset=utf-8',
      'Application/JSON', ' application/json;stream=watch',
      'application/json;as=Table;g=meta.k8s.io;v=v1' }) do
      assert.same({ 'application/json', 'json values', 'json' }, { testing.media_of(ct) }, ct)
    end
  end)

  it('is none for a response without a Content-Type: klua does not guess', function()
    assert.is_nil(testing.media_of(nil))
    assert.is_nil(testing.media_of(''))
    assert.is_nil(testing.media_of(' ; charset=utf-8'))
  end)

  -- KEP-4222: a LIST or a GET in CBOR is one data item, a watch a CBOR Sequence; client-go
  -- refuses a watch answered with one item, and a LIST is never a sequence.
  it('is CBOR decoding for application/cbor and CBOR framing for application/cbor-seq, and nothing else', function()
    assert.same({ 'application/cbor', 'none', 'cbor' }, { testing.media_of('application/cbor') })
    assert.same({ 'application/cbor-seq', 'cbor sequence', 'none' }, { testing.media_of('Application/CBOR-Seq; x=y') })
  end)

  it('is none for a type klua does not read', function()
    for _, ct in ipairs({ 'application/vnd.kubernetes.protobuf', 'application/vnd.kubernetes.protobuf;stream=watch',
      'application/yaml', 'text/html; charset=utf-8', 'application/jsonx', 'application/json-patch+json',
      'application/cbor-seqx' }) do
      assert.is_nil(testing.media_of(ct), ct)
    end
  end)
end)
