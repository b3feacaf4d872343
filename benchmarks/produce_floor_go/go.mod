module strom.dev/producefloor

go 1.26.0
