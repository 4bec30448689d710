"""A team's own agent in CES's session shape: a RunSessionRequest in, a RunSessionResponse out."""

import json, re, sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Agent(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        app = request["config"]["session"].split("/sessions/")[0]
        outputs = []
        for given in request["inputs"]:
            if "toolResponses" in given:  # the tool ran: say what it found
                found = given["toolResponses"]["toolResponses"][0]["response"]
                outputs.append({"text": f"Your order is {found.get('status', 'unknown')}."})
            elif order := re.search(r"\d+", given.get("text", "")):  # ask for the tool
                call = {"tool": f"{app}/tools/lookup-order", "args": {"order": int(order[0])}}
                outputs.append({"toolCalls": {"toolCalls": [call]}})
        body = json.dumps({"outputs": outputs}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8081), Agent).serve_forever()
