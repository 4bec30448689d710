// A second language: a Node.js client (@grpc/grpc-js, with messages loaded by
// @grpc/proto-loader straight from our protos/) creates, gets and lists evaluations against a
// running ces-eval. Run by tests/integration/test_node_client.py, which starts the server and
// passes its address in CES_EVAL_TARGET and the proto include folders in CES_EVAL_PROTO_PATH.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const target = process.env.CES_EVAL_TARGET;
const includeDirs = (process.env.CES_EVAL_PROTO_PATH ?? "").split(path.delimiter);
const APP = "projects/node-project/locations/global/apps/node-app";

const definition = protoLoader.loadSync("google/cloud/ces/v1beta/evaluation_service.proto", {
  includeDirs,
  keepCase: false,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
});
const api = grpc.loadPackageDefinition(definition);
const client = new api.google.cloud.ces.v1beta.EvaluationService(
  target,
  grpc.credentials.createInsecure(),
);

function call(method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10000 }, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

function golden(displayName) {
  return {
    displayName,
    tags: ["node"],
    golden: { turns: [{ steps: [{ userInput: { text: "Hallo from Node" } }] }] },
  };
}

test("create, get and list evaluations from Node.js", async () => {
  const created = await call("CreateEvaluation", {
    parent: APP,
    evaluationId: "from-node",
    evaluation: golden("From Node"),
  });
  assert.equal(created.name, `${APP}/evaluations/from-node`);
  assert.ok(created.etag.length > 0);
  assert.equal(created.inputs, "golden");

  const second = await call("CreateEvaluation", { parent: APP, evaluation: golden("Second") });
  assert.match(second.name, new RegExp(`^${APP}/evaluations/[a-z][a-z0-9-]+$`));

  const got = await call("GetEvaluation", { name: created.name });
  assert.equal(got.displayName, "From Node");
  assert.deepEqual(got.tags, ["node"]);
  assert.equal(got.golden.turns[0].steps[0].userInput.text, "Hallo from Node");

  const names = [];
  let pageToken = "";
  do {
    const page = await call("ListEvaluations", { parent: APP, pageSize: 1, pageToken, orderBy: "name" });
    names.push(...page.evaluations.map((e) => e.name));
    pageToken = page.nextPageToken;
  } while (pageToken);
  assert.deepEqual(names, [created.name, second.name].sort());

  await assert.rejects(call("GetEvaluation", { name: `${APP}/evaluations/missing` }), (error) => {
    assert.equal(error.code, grpc.status.NOT_FOUND);
    assert.ok(error.metadata.get("grpc-status-details-bin").length > 0);
    return true;
  });
  client.close();
});
